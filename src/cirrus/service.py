"""The per-request pipeline: resolve the model, lease an instance, generate (or embed, or count a prompt's
tokens) under a deadline, release, and say what the worker actually processed (for billing work that ended
early)."""

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from cirrus.catalog import Catalog, ModelSpec
from cirrus.errors import InternalError, InvalidInput, WorkerCrashed
from cirrus.pool import Lease, Pool, Worker
from cirrus.pool.prompt_keys import prompt_chain
from cirrus.runtime.embedding import EmbeddingInput, Embeddings
from cirrus.runtime.events import Finished, GenerationEvent, TextDelta
from cirrus.runtime.params import GenerationInput, Usage
from cirrus.runtime.progress import Progress

log = logging.getLogger(__name__)
# How long closing a request waits for its worker to confirm a cancel (normally one engine step, milliseconds).
# A worker slower than this is not waited for: the caller's answer goes out, and the slot is released when the
# worker confirms or is killed after its cancel grace.
SETTLE_WAIT_S = 0.5
WHAT_TASKS_DO = {"text-generation": "generate text", "text-embeddings": "embed text"}


ColdStartHook = Callable[[dict[str, float]], None]  # a cold start's phases, as `Generation.cold_start_phases`


@dataclass(frozen=True)
class InferenceRequest:
    request_id: str
    model: str
    inputs: GenerationInput
    keep_alive_s: float | None = None
    affinity: str | None = None
    # On the loop's clock: when the whole request (gateway steps included) must be answered; None starts the
    # time limit when the service is called (the embedded SDK).
    deadline: float | None = None
    reject_if_busy: bool = False  # refuse at once (429) rather than wait for a slot
    # Background work (a batch item): it takes only slots nothing interactive wants, and this is called when an
    # interactive request needs its slot back (the caller then stops the work: `Pool.acquire`).
    preempt: Callable[[], None] | None = None


@dataclass
class Completion:
    text: str
    finish_reason: str
    usage: Usage
    cold_start: bool
    queue_s: float
    stop_sequence: str | None = None  # the stop string that ended the answer, if one did


async def collect(events: AsyncIterable[GenerationEvent], cold_start: bool, queue_s: float) -> Completion:
    """The whole answer of a stream of events."""
    parts: list[str] = []
    async for event in events:
        if isinstance(event, TextDelta):
            parts.append(event.text)
        else:
            text = "".join(parts)
            return Completion(
                text, event.finish_reason, event.usage, cold_start, queue_s, event.stop_sequence
            )
    raise RuntimeError("generation ended without a finish event")


@dataclass
class Generation:
    """A started generation: the first event is already in hand, so start-up errors surface before any byte
    of a response is sent. Iterate it once; close it (or let iteration end) to release the instance."""

    lease: Lease
    _events: AsyncIterator[GenerationEvent]
    _first: GenerationEvent
    _keep_alive_s: float | None
    _request_id: str = ""
    _progress: Progress = field(default_factory=Progress)
    _closing: "asyncio.Future[None] | None" = field(default=None)

    @property
    def cold_start(self) -> bool:
        return self.lease.cold_start

    @property
    def queue_s(self) -> float:
        return self.lease.queue_s

    @property
    def node_id(self) -> str | None:
        return None

    def cold_start_phases(self) -> dict[str, float]:
        return self.lease.instance.status().cold_start_phases

    def processed_usage(self) -> Usage:
        """The tokens the worker really processed and generated, for billing; final once the generation is closed
        (`aclose()` returned, whatever ended it: the last event, the client leaving, the deadline, a crash).

        Finished: the finish event's usage. Cancelled (client gone, deadline): the worker's own count, sent
        when it confirmed the cancel. A crash, or a worker that did not confirm within SETTLE_WAIT_S: the best
        figures known, the prompt tokens it reported when it admitted the request and the tokens generated up
        to its last text frame (reasoning tokens unknown: 0)."""
        return self._progress.usage()

    async def __aiter__(self) -> AsyncIterator[GenerationEvent]:
        try:
            event: GenerationEvent | None = self._first
            while event is not None:
                yield event
                event = None if isinstance(event, Finished) else await self._next()
        finally:
            await self.aclose()

    async def _next(self) -> GenerationEvent:
        return await anext(self._events)

    async def aclose(self) -> None:
        """Every caller waits for the one close: a later caller (the biller) must not read the usage before the
        worker confirmed the cancel that an earlier close (the response's iterator) sent."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._settle_and_release())
        await asyncio.shield(self._closing)

    async def _settle_and_release(self) -> None:
        try:
            await self._events.aclose()  # type: ignore[attr-defined]
        except Exception:  # closing only cancels in the worker; a failure there is the worker's exit path's
            log.debug("closing the events of %s failed", self._request_id, exc_info=True)
        await _settle_and_release(self.lease, self._progress.wire_id, self._keep_alive_s)

    async def collect(self) -> Completion:
        return await collect(self, self.cold_start, self.lease.queue_s)


@dataclass(frozen=True)
class EmbeddingRequest:
    request_id: str
    model: str
    inputs: EmbeddingInput
    keep_alive_s: float | None = None
    deadline: float | None = None  # as InferenceRequest's
    preempt: Callable[[], None] | None = None  # as InferenceRequest's


@dataclass(frozen=True)
class EmbeddingResult:
    vectors: list[list[float]]
    usage: Usage
    cold_start: bool
    queue_s: float


@runtime_checkable
class EmbeddingWorker(Protocol):
    """What an embeddings instance's worker does beyond the pool's Worker."""

    async def embed(
        self,
        request_id: str,
        inputs: EmbeddingInput,
        deadline: float | None = None,
        progress: Progress | None = None,
    ) -> Embeddings: ...


@runtime_checkable
class CountingWorker(Protocol):
    """What a text-generation instance's worker does beyond the pool's Worker: count a prompt's tokens."""

    async def count(
        self,
        request_id: str,
        inputs: GenerationInput,
        deadline: float | None = None,
        progress: Progress | None = None,
    ) -> int: ...


def require_task(spec: ModelSpec, task: str) -> None:
    """A request shaped for one task, sent to a model of another, is the caller's mistake: say which."""
    if spec.task != task:
        raise InvalidInput(
            f"{spec.id} is a {spec.task} model: it cannot {WHAT_TASKS_DO.get(task, task)}; "
            f"send it a {spec.task} request",
            param="model",
        )


class StartedGeneration(Protocol):
    """What the gateway reads of a started generation, wherever it runs: this node's pool (`Generation`) or a
    node of a cluster (`cirrus.cluster.remote.RemoteGeneration`)."""

    @property
    def cold_start(self) -> bool: ...

    @property
    def queue_s(self) -> float: ...

    @property
    def node_id(self) -> str | None: ...  # the cluster node that runs it; None on a single node

    def cold_start_phases(self) -> dict[str, float]: ...

    def processed_usage(self) -> Usage: ...

    def __aiter__(self) -> AsyncIterator[GenerationEvent]: ...

    async def aclose(self) -> None: ...


class Backend(Protocol):
    """Where requests run: this node's pool (`InferenceService`) or a cluster's nodes
    (`cirrus.cluster.service.ClusterService`)."""

    async def start(
        self, request: InferenceRequest, progress: Progress | None = None
    ) -> StartedGeneration: ...

    async def embed(self, request: EmbeddingRequest, progress: Progress | None = None) -> EmbeddingResult: ...

    async def count_tokens(
        self, request: InferenceRequest, on_cold_start: ColdStartHook | None = None
    ) -> int: ...


class InferenceService:
    def __init__(self, catalog: Catalog, pool: Pool, request_timeout_s: float) -> None:
        self.catalog = catalog
        self.pool = pool
        self.request_timeout_s = request_timeout_s

    async def start(self, request: InferenceRequest, progress: Progress | None = None) -> Generation:
        """A generation with its first event in hand. `progress` (optional) receives what the worker reports
        even when starting fails (a deadline before the first token): `progress.usage()` is then final once
        this raised; on success `Generation.processed_usage()` reads the same figures."""
        spec = self.catalog.require_installed(request.model)
        require_task(spec, "text-generation")
        started = asyncio.get_running_loop().time()
        deadline = request.deadline if request.deadline is not None else started + self.request_timeout_s
        generation = await self._first_event(spec, request, deadline, progress or Progress())
        if generation.cold_start:
            generation.lease.instance.first_token_s = asyncio.get_running_loop().time() - started
        return generation

    async def _first_event(
        self, spec: ModelSpec, request: InferenceRequest, deadline: float, progress: Progress
    ) -> Generation:
        """A worker that died before it admitted the request (it had just exited, or died with the request still
        queued in it) did no work for it: that is tried again, once, on another instance, within the same
        deadline. A crash after admission is the caller's 502: the request may be what crashed it."""
        chain = prompt_chain(request.inputs)
        inputs = dataclasses.replace(request.inputs, background=True) if request.preempt else request.inputs
        for attempt in (1, 2):
            lease = await self.pool.acquire(
                spec,
                deadline,
                request.affinity,
                chain=chain,
                reject_if_busy=request.reject_if_busy,
                preempt=request.preempt,
            )
            events = lease.worker.generate(request.request_id, inputs, deadline, progress)
            try:
                first = await anext(events)
            except BaseException as exc:
                await Generation(
                    lease, events, _NOTHING, request.keep_alive_s, request.request_id, progress
                ).aclose()
                if attempt == 2 or not isinstance(exc, WorkerCrashed) or progress.started:
                    raise
                log.warning("the worker for %s died before taking the request; trying another", spec.id)
                continue
            return Generation(lease, events, first, request.keep_alive_s, request.request_id, progress)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def complete(self, request: InferenceRequest) -> Completion:
        return await (await self.start(request)).collect()

    async def embed(self, request: EmbeddingRequest, progress: Progress | None = None) -> EmbeddingResult:
        """The request's vectors. `progress` (optional) receives the tokens the worker read, even when this
        raises (a deadline while the worker was embedding): `progress.usage()` is final once this returned or
        raised. A worker found dead when the request was sent is replaced by another instance, once."""
        spec = self.catalog.require_installed(request.model)
        require_task(spec, "text-embeddings")
        started = asyncio.get_running_loop().time()
        deadline = request.deadline if request.deadline is not None else started + self.request_timeout_s
        progress = progress or Progress()
        for attempt in (1, 2):
            lease = await self.pool.acquire(spec, deadline, preempt=request.preempt)
            try:
                embeddings = await _embed_on(lease, request, deadline, progress)
            except WorkerCrashed:
                if attempt == 2 or progress.sent:
                    raise
                log.warning("the worker for %s was gone when the request was sent; trying another", spec.id)
                continue
            finally:
                await asyncio.shield(_settle_and_release(lease, progress.wire_id, request.keep_alive_s))
            if lease.cold_start:
                lease.instance.first_token_s = asyncio.get_running_loop().time() - started
            usage = Usage(embeddings.prompt_tokens, 0)
            return EmbeddingResult(embeddings.vectors, usage, lease.cold_start, lease.queue_s)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def count_tokens(
        self, request: InferenceRequest, on_cold_start: ColdStartHook | None = None
    ) -> int:
        """The prompt tokens a generation of `request.inputs` would report, rendered and tokenized by a worker of
        the model; nothing is generated. A loaded instance's worker answers at once, between its decode steps,
        without a slot: a count neither waits behind running answers nor keeps the instance warm. With none
        loaded (or one that stopped meanwhile), it leases a slot as a generation does (a cold start, reported to
        `on_cold_start` with its phases, as a generation's is to the metrics), releases it at once with the
        request's keep-alive, and is tried again on another instance, once, if the worker was found dead when
        the request was sent."""
        spec = self.catalog.require_installed(request.model)
        require_task(spec, "text-generation")
        loop = asyncio.get_running_loop()
        deadline = request.deadline if request.deadline is not None else loop.time() + self.request_timeout_s
        counted = await _count_on_loaded(self.pool.serving_worker(spec.id), request, deadline)
        if counted is not None:
            return counted
        progress = Progress()
        for attempt in (1, 2):
            lease = await self.pool.acquire(spec, deadline)
            if lease.cold_start and on_cold_start is not None:
                on_cold_start(lease.instance.status().cold_start_phases)
            try:
                return await _count_on(lease, request, deadline, progress)
            except WorkerCrashed:
                if attempt == 2 or progress.sent:
                    raise
                log.warning("the worker for %s was gone when the request was sent; trying another", spec.id)
            finally:
                await asyncio.shield(_settle_and_release(lease, progress.wire_id, request.keep_alive_s))
        raise AssertionError("unreachable: the last attempt returns or raises")


_NOTHING = Finished("error", Usage(0, 0))  # the first event of a generation that never started


async def _embed_on(
    lease: Lease, request: EmbeddingRequest, deadline: float, progress: Progress
) -> Embeddings:
    worker = lease.worker
    if not isinstance(worker, EmbeddingWorker):
        raise InternalError(f"the worker serving {lease.instance.spec.id} cannot embed")
    return await worker.embed(request.request_id, request.inputs, deadline, progress)


async def _count_on_loaded(worker: Worker | None, request: InferenceRequest, deadline: float) -> int | None:
    """None when there is no loaded worker, or it was found gone before the count reached it. A worker that dies
    once it has the count is the caller's 502, as for a generation: the count may be what crashed it."""
    if not isinstance(worker, CountingWorker):
        return None
    progress = Progress()
    try:
        return await worker.count(request.request_id, request.inputs, deadline, progress)
    except WorkerCrashed:
        if progress.sent:
            raise
        log.info("the loaded worker for %s was gone before a count; leasing an instance", request.model)
        return None


async def _count_on(lease: Lease, request: InferenceRequest, deadline: float, progress: Progress) -> int:
    worker = lease.worker
    if not isinstance(worker, CountingWorker):
        raise InternalError(f"the worker serving {lease.instance.spec.id} cannot count tokens")
    return await worker.count(request.request_id, request.inputs, deadline, progress)


async def _settle_and_release(lease: Lease, stream_id: str, keep_alive_s: float | None) -> None:
    """Release once a cancelled request has stopped in the worker, so the next lease finds its slot free; but
    wait for that at most SETTLE_WAIT_S, so a hung worker never holds up the caller's answer (its slot stays
    taken until the worker confirms or is killed). A request that finished, the usual case, is released at once:
    no task, no timer."""
    if lease.settled_now(stream_id):
        lease.release(keep_alive_s)
        return
    await asyncio.wait({lease.release_when_settled(stream_id, keep_alive_s)}, timeout=SETTLE_WAIT_S)
