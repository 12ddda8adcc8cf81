"""The node agent: one per Ray node that offers the `cirrus` resource, pinned to it, owning that node's Platform
(its pool, launcher, spare workers, memory budget and artifact store: the single-node code, not a copy). Gateways
call it through Ray; it holds no gateway state (tokens, limits and usage stay in the gateways).

Its settings come from the node's own environment (the CIRRUS_* variables given to `ray start`), so each node has
its own state and cache directories.

This class is plain Python: `cirrus.cluster.fleet` wraps it with `ray.remote` when it places one on a node, and
tests may call it directly.
"""

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, replace
from typing import Any

from cirrus.cluster.report import NodeReport, NodeSources, ServiceTimes, node_report
from cirrus.cluster.streams import Streams
from cirrus.cluster.wire import Batch, Failed, Opened, Tally
from cirrus.config import Settings
from cirrus.errors import CirrusError, InternalError, WorkerCrashed
from cirrus.platform import Platform
from cirrus.runtime.events import Finished, GenerationEvent
from cirrus.runtime.params import Usage
from cirrus.runtime.progress import Progress
from cirrus.service import EmbeddingRequest, EmbeddingResult, Generation, InferenceRequest
from cirrus.store.gguf import CHAT_TEMPLATE_KEY

log = logging.getLogger(__name__)
BATCH_WINDOW_PER_STREAM_S = 0.015
BATCH_WINDOW_MAX_S = 0.1


class NodeAgent:
    def __init__(self, node_id: str, address: str) -> None:
        self.node_id = node_id
        self.platform = Platform(Settings(), gateway=False)
        self._sources = NodeSources(
            node_id,
            address,
            self.platform.catalog,
            self.platform.pool,
            self.platform.launcher,
            ServiceTimes(),
        )
        self._streams = Streams()
        self._started: asyncio.Future[None] | None = None

    async def ready(self) -> dict[str, Any]:
        """Start the node's platform once; what a gateway logs about the node."""
        if self._started is None:
            self._started = asyncio.ensure_future(self.platform.start())
        await asyncio.shield(self._started)
        return {
            "node_id": self.node_id,
            "pid": os.getpid(),
            "state_dir": str(self.platform.settings.state_dir),
        }

    async def status(self) -> NodeReport:
        await self.ready()
        return node_report(self._sources)

    async def chat_template(self, model: str) -> dict[str, str]:
        """The model's GGUF chat template (what the gateway's family lookup reads), or nothing."""
        metadata = await self.platform.launcher.metadata(self.platform.catalog.get(model))
        template = metadata.get(CHAT_TEMPLATE_KEY)
        return {CHAT_TEMPLATE_KEY: template} if isinstance(template, str) else {}

    async def prewarm(self, model: str) -> dict[str, Any]:
        await self.ready()
        spec = self.platform.catalog.require_installed(model)
        return asdict(await self.platform.pool.prewarm(spec, self.platform.settings.worker_start_timeout_s))

    async def unload(self, model: str) -> int:
        return await self.platform.pool.unload(model)

    async def generate(self, key: str, request: InferenceRequest, left_s: float) -> AsyncIterator[Batch]:
        """Stream one generation as batches (see `cirrus.cluster.wire`). `key` names it for `close`.

        The generation runs in a task of the agent's own that fills an outbox; this generator only relays it.
        A close cancels that task, never Ray's: Ray's cancel may land while Ray reports a batch, outside this
        generator, and leave it suspended, with nothing to stop the work it relays."""
        request = replace(request, deadline=asyncio.get_running_loop().time() + left_s)
        await self.ready()
        outbox: asyncio.Queue[Batch | None] = asyncio.Queue()
        work = self._streams.open(key, lambda: self._stream(key, request, outbox))
        if work is None:
            return  # closed before it began
        try:
            while (batch := await outbox.get()) is not None:
                yield batch
        finally:
            work.cancel()  # the gateway stopped reading: stop the work (a no-op once it ended)

    async def _stream(
        self, key: str, request: InferenceRequest, outbox: "asyncio.Queue[Batch | None]"
    ) -> None:
        progress = Progress()
        began = time.monotonic()
        generation: Generation | None = None
        try:
            try:
                generation = await self.platform.service.start(request, progress)
            except CirrusError as error:
                outbox.put_nowait([Failed(error, progress.usage(), progress.started)])
                return
            opened = Opened(
                self.node_id,
                generation.lease.instance.id,
                generation.cold_start,
                generation.queue_s,
                generation.cold_start_phases(),
            )
            async for batch in _batches(generation, opened, progress, self._batch_window):
                outbox.put_nowait(batch)
        finally:
            outbox.put_nowait(None)
            await self._streams.end(key, self._closed(generation, progress, request.model, began))

    def _batch_window(self) -> float:
        """How long a stream gathers tokens before it sends them: nothing while it runs alone (each token goes
        at once), up to BATCH_WINDOW_MAX_S as streams share the node. A streamed item costs the agent and the
        gateway about a millisecond of CPU each, taken from the engine exactly when the node is busy; gathering
        makes the cost per token fall as the load grows."""
        return min(BATCH_WINDOW_MAX_S, BATCH_WINDOW_PER_STREAM_S * (self._streams.running - 1))

    async def _closed(
        self, generation: Generation | None, progress: Progress, model: str, began: float
    ) -> Usage:
        if generation is not None:
            await generation.aclose()
            self._sources.service_times.add(model, time.monotonic() - began)
        return progress.usage()

    async def close(self, key: str) -> Usage | None:
        """Stop a generation the gateway no longer reads (its client left, its time limit passed) and return what
        the worker processed: the figures an early end is billed with; None if this agent knows nothing of it."""
        return await self._streams.close(key)

    async def embed(
        self, request: EmbeddingRequest, left_s: float
    ) -> tuple[EmbeddingResult | None, Failed | None]:
        request = replace(request, deadline=asyncio.get_running_loop().time() + left_s)
        await self.ready()
        progress = Progress()
        try:
            return await self.platform.service.embed(request, progress), None
        except CirrusError as error:
            return None, Failed(error, progress.usage(), progress.sent)

    async def count_tokens(
        self, request: InferenceRequest, left_s: float
    ) -> tuple[int | None, CirrusError | None]:
        """The prompt's tokens, or the error (returned, not raised, so the gateway gets the CirrusError itself)."""
        request = replace(request, deadline=asyncio.get_running_loop().time() + left_s)
        await self.ready()
        try:
            return await self.platform.service.count_tokens(request), None
        except CirrusError as error:
            return None, error


async def _batches(
    generation: Generation, opened: Opened, progress: Progress, window: Callable[[], float]
) -> AsyncIterator[Batch]:
    """The generation's events in batches, each ending with a tally: the first at once, later ones holding what
    arrived within `window()` seconds of the previous one. An error mid-stream (a crash, the time limit) ends the
    stream with `Failed`, billed with the worker's confirmed count."""
    queue: asyncio.Queue[GenerationEvent | CirrusError] = asyncio.Queue()
    pump = asyncio.ensure_future(_pump(generation, queue))
    loop = asyncio.get_running_loop()
    batch: Batch = [opened]
    sent_at = -float("inf")
    try:
        while True:
            ready = await _gather(queue, sent_at + window())
            last = ready[-1]
            batch.extend(item for item in ready if not isinstance(item, CirrusError))
            if isinstance(last, CirrusError):
                await generation.aclose()  # the worker confirms its count of a cancelled request
                batch.append(Failed(last, progress.usage(), progress.started))
                yield batch
                return
            batch.append(Tally(progress.usage(), isinstance(last, Finished)))
            yield batch
            sent_at = loop.time()
            if isinstance(last, Finished):
                return
            batch = []
    finally:
        pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pump


async def _gather(
    queue: "asyncio.Queue[GenerationEvent | CirrusError]", until: float
) -> list[GenerationEvent | CirrusError]:
    """At least one item; then whatever else arrives before `until` (on the loop's clock), stopping early at the
    generation's last item."""
    items = [await queue.get()]
    while not isinstance(items[-1], Finished | CirrusError):
        if not queue.empty():
            items.append(queue.get_nowait())
            continue
        left_s = until - asyncio.get_running_loop().time()
        if left_s <= 0:
            break
        try:
            async with asyncio.timeout(left_s):
                items.append(await queue.get())
        except TimeoutError:
            break
    return items


async def _pump(generation: Generation, queue: "asyncio.Queue[GenerationEvent | CirrusError]") -> None:
    """Every generation ends the queue: with its finish, its error, or an error saying what went wrong."""
    try:
        async for event in generation:
            queue.put_nowait(event)
            if isinstance(event, Finished):
                return
        queue.put_nowait(WorkerCrashed("the generation ended without a finish"))
    except CirrusError as error:
        queue.put_nowait(error)
    except Exception as error:  # a bug must end the stream with an error, never leave it waiting
        log.exception("a generation failed in the node agent")
        queue.put_nowait(InternalError(f"the node agent failed: {type(error).__name__}"))
