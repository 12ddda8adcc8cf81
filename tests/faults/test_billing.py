"""Billing under faults, against a real `cirrus serve` on SQLite: a stream its client abandons is metered with the
tokens the worker really processed, and 16 concurrent requests on a free account with room for one overspend
its allocation by at most one request's reservation."""

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from cirrus.auth import Permission
from cirrus.auth.store import IdentityStore, Plan
from cirrus.catalog import ArtifactRef, ModelSpec
from cirrus.catalog.spec import Pricing
from cirrus.db import open_database
from cirrus.metering.estimate import TokenEstimator
from cirrus.runtime.params import GenerationInput, SamplingParams
from tests.integration.gateway import SMOLLM, bearer, write_gateway_catalog
from tests.integration.server import Server, running_server, wait_until

pytestmark = pytest.mark.integration

ROOM_FOR_ONE = 0.01  # neurons: any request admitted uses it up
CONCURRENT = 16
SHORT = {"prompt": "Say hi", "max_tokens": 8, "temperature": 0}
LONG = {"prompt": "Write a long story about a dragon and a knight.", "max_tokens": 400, "temperature": 0}
# The catalog's price for SmolLM2 (tests/integration/gateway.py), to work out one request's reservation.
SMOLLM_SPEC = ModelSpec(
    id=SMOLLM,
    artifact=ArtifactRef(path="/unused.gguf"),
    context_window=2048,
    pricing=Pricing(input_per_million=10.0, output_per_million=20.0, cached_input_per_million=5.0),
)


@dataclass(frozen=True)
class Billing:
    server: Server
    database: Path
    paid: str  # a paid account's token: run and read usage
    frugal: str  # a free account's token, its allocation room for one request


async def _provision(database: Path) -> tuple[str, str]:
    db = await open_database(str(database))
    try:
        store = IdentityStore(db)
        await store.migrate()
        paid = (await store.create_account("payer", Plan.PAID)).id
        free = (await store.create_account("frugal", Plan.FREE)).id
        await store.set_daily_free_neurons(free, ROOM_FOR_ONE)
        permissions = (Permission.RUN, Permission.READ_USAGE)
        paid_token, _ = await store.create_token(paid, "paid", permissions=permissions)
        free_token, _ = await store.create_token(free, "frugal", permissions=permissions)
        return paid_token, free_token
    finally:
        await db.close()


@pytest.fixture(scope="module")
def billing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Billing]:
    directory = tmp_path_factory.mktemp("billing")
    database = directory / "cirrus.db"
    paid, frugal = asyncio.run(_provision(database))
    catalog = write_gateway_catalog(directory)
    with running_server(
        directory, "--catalog", str(catalog), database=str(database), auth_cache_ttl_s="0", spare_workers="0"
    ) as server:
        yield Billing(server, database, paid, frugal)


def usage(server: Server, token: str) -> dict[str, Any]:
    response = httpx.get(f"{server.url}/usage", headers=bearer(token), timeout=10)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    return result


def statuses(database: Path, request_id: str) -> list[tuple[int, int, int]]:
    """(status, prompt tokens, completion tokens) of each usage event a request left."""
    with sqlite3.connect(database) as db:
        rows = db.execute(
            "SELECT status, prompt_tokens, completion_tokens FROM usage_events WHERE request_id = ?",
            (request_id,),
        ).fetchall()
    return [(int(s), int(p), int(c)) for s, p, c in rows]


def read_events_then_leave(server: Server, token: str, events: int, request_id: str) -> int:
    """Stream an answer, read `events` of its text events, then hang up; return how many were read."""
    body = {**LONG, "stream": True}
    headers = {**bearer(token), "x-request-id": request_id}
    seen = 0
    with (
        httpx.Client(timeout=60) as client,
        client.stream("POST", f"{server.url}/ai/run/{SMOLLM}", json=body, headers=headers) as response,
    ):
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: {"):
                seen += 1
                if seen >= events:
                    break
    return seen  # leaving the block closes the connection mid-stream


def test_an_abandoned_stream_is_metered_with_the_tokens_it_processed(billing: Billing) -> None:
    request_id = "abandoned-after-three"
    assert read_events_then_leave(billing.server, billing.paid, 3, request_id) == 3
    assert wait_until(lambda: bool(statuses(billing.database, request_id)), timeout_s=20)
    ((status, prompt, completion),) = statuses(billing.database, request_id)
    assert status == 499
    assert prompt > 0
    assert 3 <= completion < LONG["max_tokens"]  # type: ignore[operator]
    (row,) = [r for r in usage(billing.server, billing.paid)["rows"] if r["model"] == SMOLLM]
    assert (row["requests"], row["errors"]) == (1, 1)
    assert (row["prompt_tokens"], row["completion_tokens"]) == (prompt, completion)
    assert row["neurons"] > 0


def test_concurrent_requests_overspend_a_free_allocation_by_at_most_one_reservation(billing: Billing) -> None:
    start = threading.Barrier(CONCURRENT)

    def one(_: int) -> httpx.Response:
        with httpx.Client(timeout=120) as client:
            start.wait(timeout=30)
            return client.post(
                f"{billing.server.url}/ai/run/{SMOLLM}", json=SHORT, headers=bearer(billing.frugal)
            )

    with ThreadPoolExecutor(CONCURRENT) as pool:
        answers = list(pool.map(one, range(CONCURRENT)))
    ran = [a for a in answers if a.status_code == 200]
    refused = [a for a in answers if a.status_code == 429]
    assert len(ran) + len(refused) == CONCURRENT, [a.text for a in answers]
    assert all(a.json()["errors"][0]["code"] == 3036 for a in refused)
    assert len(ran) == 1  # one gateway: the first admission's reservation fills the allocation at once

    def metered() -> list[dict[str, Any]]:
        days: list[dict[str, Any]] = usage(billing.server, billing.frugal)["days"]
        return days if days and days[0]["requests"] == CONCURRENT else []

    assert wait_until(lambda: bool(metered()), timeout_s=20)
    used = metered()[0]["neurons"]
    reservation = TokenEstimator().generation(
        SMOLLM_SPEC, GenerationInput(prompt=str(SHORT["prompt"]), sampling=SamplingParams(max_tokens=8))
    )
    assert 0 < used - ROOM_FOR_ONE <= reservation.neurons
