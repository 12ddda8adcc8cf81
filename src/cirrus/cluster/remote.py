"""A generation running on another node, read by the gateway from the node agent's stream of batches (see
`cirrus.cluster.wire`). It answers what the gateway asks of any started generation (`service.StartedGeneration`).

A node that goes away mid-stream (its machine died, its agent crashed) ends the stream with WorkerCrashed, the
protocol's 502 / 3050 error frame, as soon as the gateway learns of it: from Ray's error, or from the fleet
marking the node lost, whichever comes first, so a dead node never leaves a stream hanging.
"""

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from cirrus.cluster.wire import Batch, Failed, Opened, Tally
from cirrus.errors import CirrusError, WorkerCrashed
from cirrus.runtime.events import Finished, GenerationEvent
from cirrus.runtime.params import Usage
from cirrus.runtime.progress import Progress

log = logging.getLogger(__name__)
CLOSE_TIMEOUT_S = 3.0


class NodeLost(Exception):
    """The node serving a request went away (or could not be reached)."""


NextBatch = Callable[[], Awaitable[Batch | None]]  # None: the stream ended


@dataclass
class RemoteGeneration:
    opened: Opened
    _pending: list[GenerationEvent]
    _next_batch: NextBatch
    _close_remote: Callable[[], Awaitable[Usage | None]]
    _progress: Progress
    _on_closed: Callable[[], None] = lambda: None
    _finished: bool = False
    _node_gone: bool = False
    _closing: "asyncio.Future[None] | None" = field(default=None)

    @property
    def cold_start(self) -> bool:
        return self.opened.cold_start

    @property
    def queue_s(self) -> float:
        return self.opened.queue_s

    @property
    def node_id(self) -> str:
        return self.opened.node_id

    def cold_start_phases(self) -> dict[str, float]:
        return self.opened.cold_start_phases

    def processed_usage(self) -> Usage:
        return self._progress.usage()

    async def __aiter__(self) -> AsyncIterator[GenerationEvent]:
        try:
            while not self._finished:
                while self._pending:
                    event = self._pending.pop(0)
                    self._finished = isinstance(event, Finished)
                    yield event
                if not self._finished:
                    self._pending = await self._read()
        finally:
            await self.aclose()

    async def _read(self) -> list[GenerationEvent]:
        try:
            batch = await self._next_batch()
        except NodeLost as lost:
            self._node_gone = True
            raise WorkerCrashed(f"the node serving this request went away: {lost}") from lost
        if batch is None:
            raise WorkerCrashed("the node's stream ended without a finish")
        try:
            return take(batch, self._progress)
        except CirrusError:
            self._finished = True  # the node ended it, and its count is final
            raise

    async def aclose(self) -> None:
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        """Unless it finished (or the node ended it, or is gone), stop it on the node and learn what it did; an
        answer of nothing (the node forgot it) leaves the last tally as the bill."""
        try:
            if not (self._finished or self._node_gone):
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    usage = await self._close_remote()
                if usage is not None:
                    self._progress.final = usage
        except Exception:  # the node is gone or confused: the best figures known stay the bill
            log.debug("closing a remote generation failed", exc_info=True)
        finally:
            self._on_closed()


def take(batch: Batch, progress: Progress) -> list[GenerationEvent]:
    """A batch's events; its tally goes into `progress`; a `Failed` is raised as its error."""
    events: list[GenerationEvent] = []
    for item in batch:
        if isinstance(item, Tally):
            see_tally(progress, item)
        elif isinstance(item, Failed):
            see_failure(progress, item)
            raise item.error
        elif not isinstance(item, Opened):
            events.append(item)
    return events


def see_tally(progress: Progress, tally: Tally) -> None:
    progress.started = progress.sent = True
    progress.prompt_tokens = tally.usage.prompt_tokens
    progress.cached_tokens = tally.usage.cached_tokens
    progress.completion_tokens = tally.usage.completion_tokens
    if tally.final:
        progress.final = tally.usage


def see_failure(progress: Progress, failed: Failed) -> None:
    """What the node processed before it failed counts: it is final, since the node closed the generation."""
    progress.started = failed.started
    progress.sent = progress.sent or failed.started
    progress.final = failed.usage
    if failed.usage.total_tokens:
        progress.prompt_tokens = failed.usage.prompt_tokens
        progress.completion_tokens = failed.usage.completion_tokens


def first_events(batch: Batch, progress: Progress) -> tuple[Opened, list[GenerationEvent]]:
    """The opening batch: `Opened` and the first events, or the node's error raised."""
    events = take(batch, progress)
    opened = next((item for item in batch if isinstance(item, Opened)), None)
    if opened is None:
        raise WorkerCrashed("the node's stream began without opening")
    return opened, events
