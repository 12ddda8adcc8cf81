"""The per-request pipeline: resolve the model, lease an instance, generate (or embed) under a deadline,
release."""

import asyncio
import contextlib
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from cirrus.catalog import Catalog, ModelSpec
from cirrus.errors import InternalError, InvalidInput
from cirrus.pool import Lease, Pool
from cirrus.runtime.embedding import EmbeddingInput, Embeddings
from cirrus.runtime.events import Finished, GenerationEvent, TextDelta
from cirrus.runtime.params import GenerationInput, Usage

WHAT_TASKS_DO = {"text-generation": "generate text", "text-embeddings": "embed text"}


@dataclass(frozen=True)
class InferenceRequest:
    request_id: str
    model: str
    inputs: GenerationInput
    keep_alive_s: float | None = None
    affinity: str | None = None


@dataclass
class Completion:
    text: str
    finish_reason: str
    usage: Usage
    cold_start: bool
    queue_s: float


async def collect(events: AsyncIterable[GenerationEvent], cold_start: bool, queue_s: float) -> Completion:
    """The whole answer of a stream of events."""
    parts: list[str] = []
    async for event in events:
        if isinstance(event, TextDelta):
            parts.append(event.text)
        else:
            return Completion("".join(parts), event.finish_reason, event.usage, cold_start, queue_s)
    raise RuntimeError("generation ended without a finish event")


@dataclass
class Generation:
    """A started generation: the first event is already in hand, so start-up errors surface before any byte
    of a response is sent. Iterate it once; close it (or let iteration end) to release the instance."""

    lease: Lease
    _events: AsyncIterator[GenerationEvent]
    _first: GenerationEvent
    _keep_alive_s: float | None
    _closed: bool = field(default=False)

    @property
    def cold_start(self) -> bool:
        return self.lease.cold_start

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
        if self._closed:
            return
        self._closed = True
        await asyncio.shield(self._settle_and_release())

    async def _settle_and_release(self) -> None:
        with contextlib.suppress(Exception):
            await self._events.aclose()  # type: ignore[attr-defined]
        with contextlib.suppress(Exception):
            await self.lease.worker.settled()
        self.lease.release(self._keep_alive_s)

    async def collect(self) -> Completion:
        return await collect(self, self.cold_start, self.lease.queue_s)


@dataclass(frozen=True)
class EmbeddingRequest:
    request_id: str
    model: str
    inputs: EmbeddingInput
    keep_alive_s: float | None = None


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
        self, request_id: str, inputs: EmbeddingInput, deadline: float | None = None
    ) -> Embeddings: ...


def require_task(spec: ModelSpec, task: str) -> None:
    """A request shaped for one task, sent to a model of another, is the caller's mistake: say which."""
    if spec.task != task:
        raise InvalidInput(
            f"{spec.id} is a {spec.task} model: it cannot {WHAT_TASKS_DO.get(task, task)}; "
            f"send it a {spec.task} request",
            param="model",
        )


class InferenceService:
    def __init__(self, catalog: Catalog, pool: Pool, request_timeout_s: float) -> None:
        self.catalog = catalog
        self.pool = pool
        self.request_timeout_s = request_timeout_s

    async def start(self, request: InferenceRequest) -> Generation:
        spec = self.catalog.require_installed(request.model)
        require_task(spec, "text-generation")
        started = asyncio.get_running_loop().time()
        deadline = started + self.request_timeout_s
        lease = await self.pool.acquire(spec, deadline, request.affinity)
        events = lease.worker.generate(request.request_id, request.inputs, deadline)
        try:
            first = await anext(events)
        except BaseException:
            await Generation(lease, events, Finished("error", Usage(0, 0)), request.keep_alive_s).aclose()
            raise
        if lease.cold_start:
            lease.instance.first_token_s = asyncio.get_running_loop().time() - started
        return Generation(lease, events, first, request.keep_alive_s)

    async def complete(self, request: InferenceRequest) -> Completion:
        return await (await self.start(request)).collect()

    async def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        spec = self.catalog.require_installed(request.model)
        require_task(spec, "text-embeddings")
        started = asyncio.get_running_loop().time()
        deadline = started + self.request_timeout_s
        lease = await self.pool.acquire(spec, deadline)
        try:
            worker = lease.worker
            if not isinstance(worker, EmbeddingWorker):
                raise InternalError(f"the worker serving {spec.id} cannot embed")
            embeddings = await worker.embed(request.request_id, request.inputs, deadline)
        finally:
            await asyncio.shield(_settle_and_release(lease, request.keep_alive_s))
        if lease.cold_start:
            lease.instance.first_token_s = asyncio.get_running_loop().time() - started
        usage = Usage(embeddings.prompt_tokens, 0)
        return EmbeddingResult(embeddings.vectors, usage, lease.cold_start, lease.queue_s)


async def _settle_and_release(lease: Lease, keep_alive_s: float | None) -> None:
    """Release only once a cancelled request has stopped in the worker, so the next lease finds it idle."""
    with contextlib.suppress(Exception):
        await lease.worker.settled()
    lease.release(keep_alive_s)
