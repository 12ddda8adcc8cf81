"""One loaded copy of a model: its worker, its memory, and when it may be stopped."""

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from cirrus.catalog import ModelSpec
from cirrus.runtime.events import GenerationEvent
from cirrus.runtime.params import GenerationInput
from cirrus.runtime.progress import Progress

_instance_numbers = itertools.count(1)


class Worker(Protocol):
    """What the pool needs of a worker; the service also streams generations from it."""

    @property
    def pid(self) -> int: ...

    @property
    def alive(self) -> bool: ...

    @property
    def responsive(self) -> bool: ...

    def watch(self) -> str | None: ...

    def on_exit(self, callback: "ExitCallback") -> None: ...

    def rss_bytes(self) -> int | None: ...

    async def stop(self, grace_s: float = 5.0) -> None: ...

    async def kill(self) -> None: ...

    def generate(
        self,
        request_id: str,
        inputs: GenerationInput,
        deadline: float | None = None,
        progress: Progress | None = None,
    ) -> AsyncIterator[GenerationEvent]: ...

    async def settled(self, stream_id: str | None = None) -> None: ...

    def cancelling(self, stream_id: str) -> bool:
        """A cancel of this stream (its wire id) is still waiting for the worker's confirmation."""
        ...

    def cold_start_phases(self) -> dict[str, float]: ...

    def set_threads(self, threads: int) -> None: ...


class ExitCallback(Protocol):
    def __call__(self) -> None: ...


class InstanceState(StrEnum):
    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"
    UNRESPONSIVE = "unresponsive"  # shown, never set: a ready instance whose worker misses its heartbeats


@dataclass
class Instance:
    spec: ModelSpec
    memory_bytes: int
    keep_alive_s: float
    last_used: float
    id: str = field(default_factory=lambda: f"inst-{next(_instance_numbers)}")
    state: InstanceState = InstanceState.STARTING
    worker: Worker | None = None
    active: int = 0
    started_at: float = 0.0
    load_s: float = 0.0
    first_token_s: float | None = None
    threads: int = 0

    @property
    def idle(self) -> bool:
        return self.state is InstanceState.READY and self.active == 0

    @property
    def serving(self) -> bool:
        """Ready and its worker answering: a worker that died or stopped answering gets no new request, even in
        the moment before its exit or the watchdog is noticed."""
        return self.state is InstanceState.READY and self.worker is not None and self.worker.responsive

    @property
    def has_room(self) -> bool:
        """Serving, and decoding fewer sequences than it has slots for."""
        return self.serving and self.active < self.spec.parallel

    @property
    def shown_state(self) -> InstanceState:
        if self.state is InstanceState.READY and not self.serving:
            return InstanceState.UNRESPONSIVE
        return self.state

    @property
    def evictable(self) -> bool:
        return self.idle and not self.spec.pinned

    @property
    def expires_at(self) -> float | None:
        if self.spec.pinned or not self.idle:
            return None
        return self.last_used + self.keep_alive_s

    def status(self) -> "InstanceStatus":
        worker = self.worker
        return InstanceStatus(
            id=self.id,
            model=self.spec.id,
            state=str(self.shown_state),
            pid=worker.pid if worker else None,
            memory_bytes=self.memory_bytes,
            rss_bytes=worker.rss_bytes() if worker else None,
            active_requests=self.active,
            parallel=self.spec.parallel,
            threads=self.threads,
            pinned=self.spec.pinned,
            started_at=self.started_at,
            load_s=self.load_s,
            first_token_s=self.first_token_s,
            cold_start_phases={
                **(worker.cold_start_phases() if worker else {}),
                **({"first_token_s": self.first_token_s} if self.first_token_s is not None else {}),
            },
            idle_since=self.last_used if self.idle else None,
            expires_at=self.expires_at,
        )


@dataclass(frozen=True)
class InstanceStatus:
    id: str
    model: str
    state: str
    pid: int | None
    memory_bytes: int
    rss_bytes: int | None
    active_requests: int
    parallel: int
    threads: int
    pinned: bool
    started_at: float
    load_s: float
    first_token_s: float | None
    cold_start_phases: dict[str, float]
    idle_since: float | None
    expires_at: float | None
