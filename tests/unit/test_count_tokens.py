"""Counting a prompt's tokens without generating: the worker's answer to a `count` frame, the server's side of it
(runtime/process.py) over a scripted engine, and the service's lease around it."""

import asyncio
import dataclasses
from pathlib import Path
from typing import cast

import pytest

from cirrus.catalog import ArtifactRef, Catalog, ModelSpec
from cirrus.errors import InternalError, InvalidInput, RequestTimeout, WorkerCrashed
from cirrus.pool import Pool
from cirrus.runtime.counting import counted
from cirrus.runtime.frames import Frame
from cirrus.runtime.params import GenerationInput
from cirrus.runtime.process import WorkerProcess
from cirrus.runtime.prompts import InputError
from cirrus.service import InferenceRequest, InferenceService
from tests.unit.fake_engine import OPTIONS, FakeEngineTransport, FakeProcess, Script
from tests.unit.fakes import FakeLauncher, spec

INPUTS = GenerationInput(messages=({"role": "user", "content": "one two three"},))
CHAT = "@cf/test/chat"


class WordTokens:
    """A prompt builder whose tokens are the words of the messages."""

    def tokens(self, inputs: GenerationInput) -> list[int]:
        words = " ".join(str(m["content"]) for m in inputs.messages or ()).split()
        if "refused" in words:
            raise InputError("the chat template rejected these messages", "messages")
        if "broken" in words:
            raise RuntimeError("a template bug")
        return list(range(len(words)))


def count_frame(text: str) -> Frame:
    inputs = GenerationInput(messages=({"role": "user", "content": text},))
    return {"type": "count", "id": "c1", "input": inputs.to_frame()}


def test_the_worker_answers_a_count_with_the_prompt_tokens_or_the_input_error() -> None:
    prompts = WordTokens()
    assert counted(prompts, count_frame("one two three")) == {
        "type": "counted",
        "id": "c1",
        "prompt_tokens": 3,
    }
    refused = counted(prompts, count_frame("refused"))
    assert (refused["type"], refused["kind"], refused["param"]) == ("failed", "invalid_input", "messages")
    broken = counted(prompts, count_frame("broken"))
    assert (broken["type"], broken["kind"]) == ("failed", "internal") and "template bug" in broken["message"]


class CountingTransport(FakeEngineTransport):
    """The scripted engine, answering counts as `answers` says: a count, a failure, the process exiting, or
    nothing until the cancel (as a worker busy in a long engine step)."""

    answers: str = "count"

    def _handle(self, frame: Frame) -> None:
        if frame["type"] == "count":
            self._count(str(frame["id"]))
        elif frame["type"] == "cancel" and self.answers == "late":
            self._reply({"type": "counted", "id": frame["id"], "prompt_tokens": 3})
        else:
            super()._handle(frame)

    def _count(self, request_id: str) -> None:
        if self.answers == "count":
            self._reply({"type": "counted", "id": request_id, "prompt_tokens": 3})
        elif self.answers == "fail":
            failed = {
                "type": "failed",
                "id": request_id,
                "kind": "invalid_input",
                "message": "no",
                "param": "x",
            }
            self._reply(failed)
        elif self.answers == "die":
            self.die()


async def counting_worker(answers: str = "count") -> tuple[WorkerProcess, CountingTransport]:
    transport = CountingTransport(Script())
    transport.answers = answers
    worker = WorkerProcess(cast(asyncio.subprocess.Process, FakeProcess(transport)), transport)
    await worker.load(OPTIONS, timeout_s=5)
    return worker, transport


def soon(seconds: float) -> float:
    return asyncio.get_running_loop().time() + seconds


async def test_a_count_returns_the_workers_figure_and_leaves_nothing_open() -> None:
    worker, transport = await counting_worker()
    assert await worker.count("r1", INPUTS, soon(5)) == 3
    [sent] = [frame for frame in transport.sent if frame["type"] == "count"]
    assert GenerationInput.from_frame(sent["input"]) == INPUTS
    assert not worker._busy() and "cancel" not in transport.sent_types()


async def test_a_count_the_worker_refuses_is_the_callers_invalid_input() -> None:
    worker, _ = await counting_worker("fail")
    with pytest.raises(InvalidInput) as refused:
        await worker.count("r1", INPUTS)
    assert refused.value.param == "x"


async def test_a_count_past_its_deadline_is_a_408_and_is_cancelled_in_the_worker() -> None:
    worker, transport = await counting_worker("late")
    with pytest.raises(RequestTimeout):
        await worker.count("r1", INPUTS, soon(0.05))
    await asyncio.wait_for(worker.settled(), 2)
    assert "cancel" in transport.sent_types() and not worker._busy() and worker.alive


class CountingLauncher:
    def __init__(self, answers: list[str]) -> None:
        self.answers = answers
        self.launched: list[CountingTransport] = []

    async def estimate_bytes(self, spec: ModelSpec) -> int:
        return 1

    async def launch(self, spec: ModelSpec) -> WorkerProcess:
        worker, transport = await counting_worker(self.answers.pop(0) if self.answers else "count")
        self.launched.append(transport)
        return worker


def catalog(tmp_path: Path) -> Catalog:
    weights = tmp_path / "model.gguf"
    weights.write_bytes(b"")
    models = [
        spec(name, artifact=ArtifactRef(path=str(weights)), max_instances=2, task=task)
        for name, task in (("chat", "text-generation"), ("embedder", "text-embeddings"))
    ]
    return Catalog(models, tmp_path)


def service_with(tmp_path: Path, answers: list[str]) -> tuple[InferenceService, CountingLauncher, Pool]:
    launcher = CountingLauncher(answers)
    pool = Pool(launcher, 1 << 30, queue_size=8, default_keep_alive_s=300)
    return InferenceService(catalog(tmp_path), pool, 5.0), launcher, pool


def count(model: str = CHAT, request_id: str = "r1") -> InferenceRequest:
    return InferenceRequest(request_id, model, INPUTS)


async def test_a_count_cold_starts_the_model_and_releases_its_slot_at_once(tmp_path: Path) -> None:
    service, launcher, pool = service_with(tmp_path, [])
    assert await service.count_tokens(dataclasses.replace(count(), keep_alive_s=60.0)) == 3
    [status] = pool.statuses()
    assert len(launcher.launched) == 1 and status.active_requests == 0 and not pool.busy()
    assert status.idle_since is not None and status.expires_at == status.idle_since + 60.0
    assert await service.count_tokens(count(request_id="r2")) == 3
    assert len(launcher.launched) == 1, "the warm instance counts the next one"


async def test_a_count_on_a_busy_loaded_model_answers_without_waiting_for_a_slot(tmp_path: Path) -> None:
    service, launcher, pool = service_with(tmp_path, [])
    model = service.catalog.require_installed(CHAT)
    leases = [await pool.acquire(model, soon(5)) for _ in range(2)]  # both instances' only slots
    assert await asyncio.wait_for(service.count_tokens(count()), 2) == 3
    assert len(launcher.launched) == 2 and all(s.active_requests == 1 for s in pool.statuses())
    for lease in leases:
        lease.release()


async def test_a_worker_gone_before_the_count_is_replaced_within_the_same_request(tmp_path: Path) -> None:
    service, launcher, _ = service_with(tmp_path, [])
    await service.count_tokens(count())
    launcher.launched[0].die()
    assert await service.count_tokens(count(request_id="r2")) == 3
    assert len(launcher.launched) == 2


async def test_a_count_that_crashes_its_worker_is_a_502_not_a_retry(tmp_path: Path) -> None:
    service, launcher, pool = service_with(tmp_path, ["die"])
    with pytest.raises(WorkerCrashed):
        await service.count_tokens(count())
    assert len(launcher.launched) == 1 and not pool.busy()


async def test_an_embeddings_model_counts_nothing(tmp_path: Path) -> None:
    service, launcher, _ = service_with(tmp_path, [])
    with pytest.raises(InvalidInput, match="text-embeddings model"):
        await service.count_tokens(count("@cf/test/embedder"))
    assert launcher.launched == []


async def test_a_worker_that_cannot_count_is_an_internal_error(tmp_path: Path) -> None:
    pool = Pool(FakeLauncher({CHAT: 1}), 1 << 30, queue_size=8, default_keep_alive_s=300)
    service = InferenceService(catalog(tmp_path), pool, 5.0)
    with pytest.raises(InternalError, match="cannot count"):
        await service.count_tokens(count())
    [status] = pool.statuses()
    assert status.active_requests == 0
