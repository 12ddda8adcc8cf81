"""The generations a node agent is streaming, by the key the gateway gave each, so that a gateway can stop one it
no longer reads and learn what its worker processed.

A close may arrive before its stream began (Ray may run the two calls in either order): the key is then marked
closed, and the stream, if it comes at all, ends at once. A close may also arrive just after its stream ended
(the gateway had not read the last batch yet): ended streams are remembered a while, with their usage.
"""

import asyncio
import contextlib
from dataclasses import dataclass, field

from cirrus.runtime.params import Usage

# How long `close` waits for a stream to stop: the generation's own settle wait (service.SETTLE_WAIT_S) and some.
CLOSE_WAIT_S = 2.0
REMEMBERED = 10_000  # ended or closed-early streams kept, oldest forgotten first


@dataclass
class _Stream:
    task: "asyncio.Task[object] | None"
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    usage: Usage = field(default_factory=lambda: Usage(0, 0))


class Streams:
    def __init__(self) -> None:
        self._streams: dict[str, _Stream] = {}  # insertion-ordered: the oldest are forgotten first

    def open(self, key: str) -> bool:
        """Called from inside the stream's own task; False if the gateway already closed it."""
        if key in self._streams:
            return False
        self._streams[key] = _Stream(asyncio.current_task())
        self._forget_oldest()
        return True

    def done(self, key: str, usage: Usage) -> None:
        stream = self._streams.get(key)
        if stream is not None:
            stream.usage = usage
            stream.task = None
            stream.ended.set()

    async def close(self, key: str) -> Usage:
        stream = self._streams.get(key)
        if stream is None:  # not begun: it never will
            ended = self._streams[key] = _Stream(None)
            ended.ended.set()
            self._forget_oldest()
            return ended.usage
        if stream.task is not None:
            stream.task.cancel()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_WAIT_S):
                await stream.ended.wait()
        return stream.usage

    def running(self) -> int:
        return sum(1 for stream in self._streams.values() if not stream.ended.is_set())

    def _forget_oldest(self) -> None:
        while len(self._streams) > REMEMBERED:
            oldest = next(iter(self._streams))
            if not self._streams[oldest].ended.is_set():
                break  # never forget a running stream; a later call trims it
            del self._streams[oldest]
