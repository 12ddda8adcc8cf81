"""Worker processes started ahead of need, so a cold start pays only for mapping weights.

Starting Python and importing llama.cpp costs more than loading a small model from the page cache; a spare
has already paid it. Taking one starts its replacement in the background, once the node is idle: starting a
process takes the same cores as decoding (measured: the request decoding while a replacement started ran at
68-77 tokens/s instead of 114-143).
"""

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Awaitable, Callable

from cirrus.runtime.process import WorkerProcess

log = logging.getLogger(__name__)


MAX_REFILL_WAIT_S = 60.0  # a node that never goes idle still gets its spare back


async def _never_busy(timeout_s: float) -> None:
    return None


class SpareWorkers:
    def __init__(self, count: int, heap_bytes: int = 0, refill_delay_s: float = 2.0) -> None:
        self._count = count
        self._heap_bytes = heap_bytes
        self._refill_delay_s = refill_delay_s
        # Set by the platform: wait (at most the given seconds) until the node is not generating.
        self.until_idle: Callable[[float], Awaitable[None]] = _never_busy
        self._spares: list[WorkerProcess] = []
        self._refill: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def reserved_bytes(self) -> int:
        """Memory the spares hold while they wait: the pool's budget leaves it out."""
        return self._count * self._heap_bytes

    @property
    def ready(self) -> int:
        return len(self.pids)

    @property
    def pids(self) -> list[int]:
        return [spare.pid for spare in self._spares if not spare.exited]

    async def fill(self) -> None:
        while not self._closed and len(self._spares) < self._count:
            self._spares.append(await WorkerProcess.start(self._heap_bytes))

    async def take(self) -> tuple[WorkerProcess, bool]:
        """A process waiting for a model, and whether it was a spare (False: started now)."""
        while self._spares:
            spare = self._spares.pop(0)
            if not spare.exited:
                self._schedule_refill()
                return spare, True
        self._schedule_refill()
        return await WorkerProcess.start(), False

    def _schedule_refill(self) -> None:
        if self._count and (self._refill is None or self._refill.done()):
            self._refill = asyncio.create_task(self._refill_quietly(), context=contextvars.Context())

    async def _refill_quietly(self) -> None:
        # Starting the replacement at once would take CPU from the cold start that just took a spare.
        await asyncio.sleep(self._refill_delay_s)
        await self.until_idle(MAX_REFILL_WAIT_S)
        try:
            await self.fill()
        except Exception:  # a spare is an optimisation; failing to start one must not hurt a request
            log.exception("could not start a spare worker process")

    async def close(self) -> None:
        self._closed = True
        if self._refill is not None:
            self._refill.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refill
        for spare in self._spares:
            await spare.kill()
        self._spares.clear()
