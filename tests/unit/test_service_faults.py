"""The service over the real pool and the server's side of real workers, with scripted engines instead of worker
processes: what a caller sees and what is billed when a worker dies, hangs, or a request ends early."""

import asyncio
import time
from pathlib import Path

import pytest

from cirrus.catalog import ArtifactRef, Catalog, ModelSpec
from cirrus.errors import RequestTimeout, WorkerCrashed
from cirrus.pool import Pool
from cirrus.runtime.embedding import EmbeddingInput
from cirrus.runtime.events import TextDelta
from cirrus.runtime.params import GenerationInput, SamplingParams, Usage
from cirrus.runtime.process import WorkerProcess
from cirrus.runtime.progress import Progress
from cirrus.service import SETTLE_WAIT_S, EmbeddingRequest, InferenceRequest, InferenceService
from tests.unit.fake_engine import CACHED_TOKENS, PROMPT_TOKENS, FakeEngineTransport, Script, loaded_worker
from tests.unit.fakes import spec

INPUTS = GenerationInput(prompt="count", sampling=SamplingParams(max_tokens=1000))


class EngineLauncher:
    """Launches WorkerProcesses over scripted engines, one script per launch in order (then the default)."""

    def __init__(self, scripts: list[Script], cancel_grace_s: float = 5.0) -> None:
        self.scripts = scripts
        self.cancel_grace_s = cancel_grace_s
        self.launched: list[tuple[WorkerProcess, FakeEngineTransport]] = []

    async def estimate_bytes(self, spec: ModelSpec) -> int:
        return 1

    async def launch(self, spec: ModelSpec) -> WorkerProcess:
        script = self.scripts.pop(0) if self.scripts else Script()
        worker, transport, _ = await loaded_worker(script)
        worker.cancel_grace_s = self.cancel_grace_s
        self.launched.append((worker, transport))
        return worker


def service_with(
    tmp_path: Path, scripts: list[Script], timeout_s: float = 5.0, **fields: object
) -> tuple[InferenceService, EngineLauncher, ModelSpec]:
    weights = tmp_path / "model.gguf"
    weights.write_bytes(b"")
    model = spec("model", artifact=ArtifactRef(path=str(weights)), max_instances=2, **fields)
    launcher = EngineLauncher(scripts)
    pool = Pool(launcher, 1 << 30, queue_size=8, default_keep_alive_s=300)
    return InferenceService(Catalog([model], tmp_path), pool, timeout_s), launcher, model


def request(model: ModelSpec, request_id: str = "r1") -> InferenceRequest:
    return InferenceRequest(request_id, model.id, INPUTS)


async def test_a_worker_that_died_before_taking_the_request_is_replaced_within_the_same_request(
    tmp_path: Path,
) -> None:
    service, launcher, model = service_with(tmp_path, [Script(dies_on_generate=True), Script(tokens=2)])
    generation = await service.start(request(model))
    completion = await generation.collect()
    assert completion.text == "t1 t2 " and len(launcher.launched) == 2
    assert generation.processed_usage() == Usage(PROMPT_TOKENS, 2, CACHED_TOKENS)


async def test_a_worker_that_dies_after_admitting_the_request_is_a_502_not_a_retry(tmp_path: Path) -> None:
    service, launcher, model = service_with(tmp_path, [Script(dies_after_start=True)])
    progress = Progress()
    with pytest.raises(WorkerCrashed):
        await service.start(request(model), progress)
    assert len(launcher.launched) == 1
    assert progress.usage() == Usage(PROMPT_TOKENS, 0, CACHED_TOKENS), "its prompt was processed"


async def test_a_client_that_leaves_mid_stream_is_billed_what_the_worker_generated(tmp_path: Path) -> None:
    service, _, model = service_with(tmp_path, [Script(tokens=1000)])
    generation = await service.start(request(model))
    texts = 0
    async for event in generation:
        texts += isinstance(event, TextDelta)
        if texts == 3:
            break
    await generation.aclose()
    usage = generation.processed_usage()
    assert usage.prompt_tokens == PROMPT_TOKENS and 3 <= usage.completion_tokens < 1000
    assert service.pool.statuses()[0].active_requests == 0


async def test_the_deadline_mid_stream_is_a_408_billed_with_the_confirmed_count(tmp_path: Path) -> None:
    service, _, model = service_with(tmp_path, [Script(tokens=1000)], timeout_s=0.2)
    generation = await service.start(request(model))
    texts = 0
    with pytest.raises(RequestTimeout):
        async for event in generation:
            texts += isinstance(event, TextDelta)
    usage = generation.processed_usage()
    assert usage.completion_tokens >= texts > 0
    assert service.pool.statuses()[0].active_requests == 0, "the slot is free once the 408 is out"


async def test_a_hung_worker_does_not_hold_up_the_408_and_is_replaced(tmp_path: Path) -> None:
    service, launcher, model = service_with(tmp_path, [Script(tokens=1000, confirms_cancel=False)], 0.2)
    launcher.cancel_grace_s = 0.5
    generation = await service.start(request(model))
    began = time.monotonic()
    with pytest.raises(RequestTimeout):
        async for _ in generation:
            pass
    assert time.monotonic() - began < 0.2 + SETTLE_WAIT_S + 1.0, "the caller did not wait out the grace"
    hung, _ = launcher.launched[0]
    for _ in range(100):
        if not hung.alive:
            break
        await asyncio.sleep(0.02)
    assert not hung.alive, "killed once its cancel grace ran out"
    assert service.pool.statuses() == []
    after = await (await service.start(request(model, "r2"))).collect()
    assert after.finish_reason == "length" and len(launcher.launched) == 2


async def test_embeddings_retry_a_worker_found_dead_and_report_what_was_read(tmp_path: Path) -> None:
    service, launcher, _ = service_with(tmp_path, [])
    weights = tmp_path / "model.gguf"
    embedder = spec(
        "embedder", artifact=ArtifactRef(path=str(weights)), task="text-embeddings", max_instances=2
    )
    service.catalog = Catalog([embedder], tmp_path)
    lease = await service.pool.acquire(embedder, asyncio.get_running_loop().time() + 5)
    lease.release()
    _, transport = launcher.launched[0]
    transport.closed = True  # the next send fails, as to a process that just exited
    progress = Progress()
    result = await service.embed(EmbeddingRequest("e1", embedder.id, EmbeddingInput(("a",))), progress)
    assert result.usage == Usage(7, 0) and progress.usage() == Usage(7, 0)
    assert len(launcher.launched) == 2
