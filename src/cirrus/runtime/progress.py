"""What a worker has reported of one request so far: the figures that bill work ending early.

A request that finishes has the worker's own count. One that ends early (the client left, its time limit passed)
is cancelled, and the worker confirms with its real count. One whose worker died has only what the frames said
before it died: the prompt's size (the `started` frame sent when the worker admitted it) and the tokens generated
up to the last text frame (each carries the running count).
"""

from dataclasses import dataclass

from cirrus.runtime.frames import Frame
from cirrus.runtime.params import Usage


def usage_of(frame: Frame) -> Usage:
    """The usage a `finished` frame reports."""
    return Usage(
        int(frame.get("prompt_tokens", 0)),
        int(frame.get("completion_tokens", 0)),
        int(frame.get("cached_tokens", 0)),
        int(frame.get("reasoning_tokens", 0)),
    )


@dataclass
class Progress:
    """Filled in by the worker's frames as they arrive, whoever reads the stream (or nobody, once abandoned)."""

    wire_id: str = ""  # the stream's id on the worker's socket, once it was opened (runtime/process.py)
    sent: bool = False  # the request was written to the worker's socket
    started: bool = False  # the worker admitted it: it has the request and began its prompt
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    final: Usage | None = None  # the worker's own count: finished, or a confirmed cancel

    def see(self, frame: Frame) -> None:
        kind = frame["type"]
        if kind == "started":
            self.started = True
            self.prompt_tokens = int(frame.get("prompt_tokens", 0))
            self.cached_tokens = int(frame.get("cached_tokens", 0))
        elif kind == "text":
            self.completion_tokens = int(frame.get("tokens", self.completion_tokens + 1))
        elif kind == "finished" and "prompt_tokens" in frame:
            self.final = usage_of(frame)
        elif kind == "embedded":
            self.final = Usage(int(frame["prompt_tokens"]), 0)

    def usage(self) -> Usage:
        """The worker's count if it gave one, else the best figures known."""
        if self.final is not None:
            return self.final
        return Usage(self.prompt_tokens, self.completion_tokens, self.cached_tokens)
