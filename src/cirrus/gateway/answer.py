"""What the gateway hands a route: the events of a live generation or of a cached answer, after the output
filters, with a hook that runs once when they end (metering, cache store, limits)."""

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from cirrus.errors import CirrusError
from cirrus.runtime.events import Finished, GenerationEvent, TextDelta
from cirrus.runtime.params import Usage
from cirrus.service import Completion, collect

EndHook = Callable[[Finished | None, CirrusError | None, str], None]
BillHook = Callable[[Usage, Finished | None, CirrusError | None, str], None]


@dataclass
class Answer:
    """Iterate once (or call `collect`); `aclose` releases what the answer holds, even mid-stream."""

    _events: AsyncIterator[GenerationEvent]
    _close: Callable[[], Awaitable[None]]
    cold_start: bool = False
    queue_s: float = 0.0
    _usage: Callable[[], Usage] = field(default=lambda: Usage(0, 0))
    _closed: bool = field(default=False)

    def processed_usage(self) -> Usage:
        """What the worker has reported: once the first event is in hand, at least the prompt's tokens."""
        return self._usage()

    async def __aiter__(self) -> AsyncIterator[GenerationEvent]:
        try:
            async for event in self._events:
                yield event
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Closing the events first runs their end hook (metering, the in-flight cache entry) even for an answer
        that was never iterated to its end; then what the answer holds (its lease) is released."""
        if not self._closed:
            self._closed = True
            try:
                if isinstance(self._events, AsyncGenerator):
                    await self._events.aclose()
            finally:
                await self._close()

    async def collect(self) -> Completion:
        try:
            return await collect(self, self.cold_start, self.queue_s)
        finally:
            await self.aclose()


async def observed(
    events: AsyncIterator[GenerationEvent], on_text: Callable[[], None], on_end: EndHook
) -> AsyncIterator[GenerationEvent]:
    """Pass events through, calling `on_end` exactly once: with the finish event, the error, or neither when
    the consumer stopped early (a client that left)."""
    parts: list[str] = []
    ended = False
    try:
        async for event in events:
            if isinstance(event, TextDelta):
                on_text()
                parts.append(event.text)
            else:
                ended = True
                on_end(event, None, "".join(parts))
            yield event
    except CirrusError as error:
        ended = True
        on_end(None, error, "".join(parts))
        raise
    finally:
        if not ended:
            on_end(None, None, "".join(parts))


class Ending:
    """How a live answer ended, billed exactly once. An answer that finished is billed at once with the
    usage its finish event carries. One that ended early (the client left, the time limit, a crash) is billed
    only after its generation closed, with what the worker really processed: until then the worker's count
    is not known, and a client that hangs up before the last frame must not go free.

    `ended` is the answer's end hook (`observed` calls it once); `closed` runs after the generation closed,
    and stands in for the end hook of an answer that was never iterated."""

    def __init__(self, on_end: EndHook, bill: BillHook) -> None:
        self._on_end = on_end
        self._bill = bill
        self._seen = False
        self._billed = False
        self._error: CirrusError | None = None
        self._text = ""

    def ended(self, finished: Finished | None, error: CirrusError | None, text: str) -> None:
        if self._seen:
            return
        self._seen = True
        self._error, self._text = error, text
        try:
            self._on_end(finished, error, text)
        finally:
            if finished is not None:
                self._bill_once(finished.usage, finished)

    @property
    def billed(self) -> bool:
        """Billed already: the answer finished (an early end is billed once its generation closed)."""
        return self._billed

    def closed(self, processed: Callable[[], Usage]) -> None:
        if not self._seen:
            self.ended(None, None, "")
        if not self._billed:
            self._bill_once(processed(), None)

    def _bill_once(self, usage: Usage, finished: Finished | None) -> None:
        if not self._billed:
            self._billed = True
            self._bill(usage, finished, self._error, self._text)
