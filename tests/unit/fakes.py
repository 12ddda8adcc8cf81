"""A fake runtime for the pool's pure scheduling logic: no processes, no engine."""

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable

from cirrus.catalog import ArtifactRef, ModelSpec
from cirrus.runtime.events import Finished, GenerationEvent, TextDelta
from cirrus.runtime.params import GenerationInput, Usage
from cirrus.runtime.progress import Progress

_pids = itertools.count(1000)


def spec(name: str, **fields: object) -> ModelSpec:
    """A one-slot model unless told otherwise, so a lease makes its instance busy."""
    base = {"id": f"@cf/test/{name}", "artifact": ArtifactRef(path="/x.gguf"), "parallel": 1}
    return ModelSpec.model_validate({**base, **fields})


class FakeWorker:
    def __init__(self) -> None:
        self._pid = next(_pids)
        self._alive = True
        self._on_exit: list[Callable[[], None]] = []
        self.stopped = False
        self.killed = False
        self.threads: list[int] = []
        self.answering = True  # False plays a worker whose heartbeat is late
        self.hung: str | None = None  # what watch() reports: set it to play a worker the watchdog condemns
        self.watched = 0

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def alive(self) -> bool:
        return self._alive

    @property
    def responsive(self) -> bool:
        return self._alive and self.answering

    def on_exit(self, callback: Callable[[], None]) -> None:
        self._on_exit.append(callback)

    def rss_bytes(self) -> int | None:
        return 1

    async def stop(self, grace_s: float = 5.0) -> None:
        self.stopped = True
        self._alive = False

    async def kill(self) -> None:
        """As a real worker's kill: the process goes, and its exit path runs."""
        self.killed = True
        if self._alive:
            self.crash()

    def watch(self) -> str | None:
        self.watched += 1
        return self.hung

    def crash(self) -> None:
        self._alive = False
        for callback in self._on_exit:
            callback()

    async def generate(
        self,
        request_id: str,
        inputs: GenerationInput,
        deadline: float | None = None,
        progress: Progress | None = None,
    ) -> AsyncIterator[GenerationEvent]:
        yield TextDelta("hi")
        yield Finished("stop", Usage(1, 1))

    async def settled(self, stream_id: str | None = None) -> None:
        return None

    def cancelling(self, stream_id: str) -> bool:
        return False

    def set_threads(self, threads: int) -> None:
        self.threads.append(threads)

    def cold_start_phases(self) -> dict[str, float]:
        return {"process_s": 0.0, "load_s": 0.0}


class FakeLauncher:
    def __init__(self, sizes: dict[str, int], launch_delay_s: float = 0.0) -> None:
        self.sizes = sizes
        self.launch_delay_s = launch_delay_s
        self.launched: list[tuple[str, FakeWorker]] = []
        self.starts = 0  # launches begun, finished or not
        self.fail_next = False

    async def estimate_bytes(self, spec: ModelSpec) -> int:
        return self.sizes[spec.id]

    async def launch(self, spec: ModelSpec) -> FakeWorker:
        self.starts += 1
        await asyncio.sleep(self.launch_delay_s)
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("launch failed")
        worker = FakeWorker()
        self.launched.append((spec.id, worker))
        return worker


class FakeClock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
