"""Turn a stream of token bytes into text that is safe to emit: whole UTF-8 characters, no stop sequence."""

import codecs


class StopMatcher:
    """Holds back text that might be the start of a stop sequence; reports when one completes."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self._stops = tuple(stop for stop in stops if stop)
        self._held = ""
        self.matched: str | None = None  # the stop sequence that ended the text

    @property
    def stopped(self) -> bool:
        return self.matched is not None

    def feed(self, text: str) -> str:
        """Text that can be emitted now; after a stop sequence appears, everything from it on is dropped."""
        if self.stopped:
            return ""
        self._held += text
        found = self._earliest_stop()
        if found is not None:
            cut, self.matched = found
            emit, self._held = self._held[:cut], ""
            return emit
        keep = self._longest_partial_stop()
        emit = self._held[: len(self._held) - keep]
        self._held = self._held[len(emit) :]
        return emit

    def flush(self) -> str:
        emit, self._held = ("" if self.stopped else self._held), ""
        return emit

    def _earliest_stop(self) -> tuple[int, str] | None:
        found = [(index, stop) for stop in self._stops if (index := self._held.find(stop)) >= 0]
        return min(found, key=lambda hit: (hit[0], -len(hit[1]))) if found else None

    def _longest_partial_stop(self) -> int:
        longest = 0
        for stop in self._stops:
            for size in range(min(len(stop) - 1, len(self._held)), longest, -1):
                if self._held.endswith(stop[:size]):
                    longest = size
                    break
        return longest


class Utf8Assembler:
    """Token pieces can split a multi-byte character; emit only complete characters."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, piece: bytes) -> str:
        return self._decoder.decode(piece)

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)
