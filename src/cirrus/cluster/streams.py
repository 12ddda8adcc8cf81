"""The generations a node agent is streaming, by the key the gateway gave each, so that a gateway can stop one it
no longer reads and learn what its worker processed.

A stream runs, then ends: its generation is closed (in a task of its own, which a cancel cannot cut short) and
its usage recorded. A close while it runs cancels it and waits for that end; a close while it ends only waits.
A close may arrive before its stream began (Ray may run the two calls in either order): the key is then marked
closed, and the stream, if it comes at all, ends at once. A close may also arrive just after the end (the gateway
had not read the last batch yet): ended streams are remembered a while, with their usage. A close that learns
nothing (an unknown key, say after the agent restarted) answers None, so the gateway keeps what it knew.
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from cirrus.runtime.params import Usage

log = logging.getLogger(__name__)
# How long `close` waits for a stream to stop: the generation's own settle wait (service.SETTLE_WAIT_S) and some.
CLOSE_WAIT_S = 2.0
REMEMBERED = 10_000  # streams kept, oldest ended ones forgotten first


@dataclass
class _Stream:
    task: "asyncio.Task[None] | None"  # while it runs: what a close cancels
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    usage: Usage | None = None
    ending: "asyncio.Task[None] | None" = None


class Streams:
    def __init__(self) -> None:
        self._streams: dict[str, _Stream] = {}  # insertion-ordered: the oldest are forgotten first
        self.running = 0  # streams begun and not yet ending

    def open(self, key: str, work: Callable[[], Coroutine[Any, Any, None]]) -> "asyncio.Task[None] | None":
        """Start the stream's work in a task of its own (what a close cancels); None if the gateway already
        closed it."""
        if key in self._streams:
            return None
        task = asyncio.ensure_future(work())
        self._streams[key] = _Stream(task)
        self.running += 1
        self._forget_ended()
        return task

    async def end(self, key: str, closing: Coroutine[Any, Any, Usage]) -> None:
        """Run the stream's closing to its end, even if the stream's own task is cancelled meanwhile, and record
        the usage it returns."""
        stream = self._streams[key]
        stream.task = None  # from here a close waits; it no longer cancels
        self.running -= 1
        stream.ending = asyncio.ensure_future(self._record(stream, closing))
        await asyncio.shield(stream.ending)

    async def close(self, key: str) -> Usage | None:
        stream = self._streams.get(key)
        if stream is None:  # not begun: it never will
            self._streams[key] = _Stream(None)
            self._streams[key].ended.set()
            self._forget_ended()
            return None
        if stream.task is not None:
            stream.task.cancel()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_WAIT_S):
                await stream.ended.wait()
        return stream.usage

    @staticmethod
    async def _record(stream: _Stream, closing: Coroutine[Any, Any, Usage]) -> None:
        """A closing that fails leaves the usage unknown (None): the gateway keeps its last tally."""
        try:
            stream.usage = await closing
        except Exception:
            log.exception("closing a stream failed")
        finally:
            stream.ended.set()

    def _forget_ended(self) -> None:
        """The oldest ended streams beyond REMEMBERED, found in insertion order (so it stops early)."""
        excess = len(self._streams) - REMEMBERED
        doomed: list[str] = []
        for key, stream in self._streams.items():
            if len(doomed) >= excess:
                break
            if stream.ended.is_set():
                doomed.append(key)
        for key in doomed:
            del self._streams[key]
