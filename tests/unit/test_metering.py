"""Metering on a real database: neurons, usage tables and queries, the meter, budgets, alerts, the usage route."""

import argparse
import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import pytest_asyncio
import uvicorn
from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from cirrus.api import account_usage
from cirrus.auth import Permission, Principal
from cirrus.auth.store import IdentityStore, Plan
from cirrus.catalog import ArtifactRef, ModelSpec
from cirrus.catalog.spec import Pricing
from cirrus.config import Settings
from cirrus.db.database import Database, Params
from cirrus.errors import DailyAllocationExhausted, SpendLimitReached
from cirrus.metering import cli
from cirrus.metering.alerts import BudgetAlerts
from cirrus.metering.budgets import BudgetGuard
from cirrus.metering.meter import Meter
from cirrus.metering.neurons import billable_neurons, neurons_for, price
from cirrus.metering.periods import seconds_to_next_day, seconds_to_next_month, utc_day, utc_month
from cirrus.metering.record import CacheStatus, UsageRecord
from cirrus.metering.store import UsageStore
from cirrus.server.handlers import install_handlers
from tests.services.http_server import serving

NOW = datetime(2025, 3, 14, 18, 0, tzinfo=UTC).timestamp()
DAY, MONTH = "2025-03-14", "2025-03"
MODEL_A, MODEL_B = "@cf/test/alpha", "@cf/test/beta"


class Clock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def unique(prefix: str) -> str:
    """Ids unique per test, so tests may share one database (as they do on PostgreSQL)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def usage(
    account: str,
    token: str | None = None,
    model: str = MODEL_A,
    *,
    neurons: float = 10.0,
    status: int = 200,
    cache: CacheStatus = "MISS",
    started_at: float = NOW,
) -> UsageRecord:
    cost = neurons * 0.011 / 1000
    return UsageRecord(
        request_id=uuid.uuid4().hex,
        account_id=account,
        token_id=token,
        model=model,
        status=status,
        error_code=None if status < 400 else 3040,
        prompt_tokens=20,
        completion_tokens=5,
        cached_tokens=4,
        queue_s=0.01,
        cold_start=False,
        execution_s=0.2,
        neurons=neurons,
        cost_usd=cost,
        cache_status=cache,
        started_at=started_at,
    )


@pytest_asyncio.fixture(loop_scope="function")
async def metering_db(database: Database) -> Database:
    """Every metering test runs on SQLite and on PostgreSQL."""
    return database


@pytest_asyncio.fixture(loop_scope="function")
async def store(metering_db: Database) -> UsageStore:
    usage_store = UsageStore(metering_db)
    await usage_store.migrate()
    await usage_store.migrate()  # migrations are idempotent
    return usage_store


class FailingDatabase:
    """A real database whose batch writes fail, as a database that went away does."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self.dialect = db.dialect
        self.attempts = 0

    async def execute(self, sql: str, params: Params = ()) -> int:
        return await self._db.execute(sql, params)

    async def execute_many(self, sql: str, rows: Any) -> None:
        self.attempts += 1
        raise ConnectionError("the database went away")

    async def fetch_all(self, sql: str, params: Params = ()) -> list[tuple[Any, ...]]:
        return await self._db.fetch_all(sql, params)

    async def fetch_one(self, sql: str, params: Params = ()) -> tuple[Any, ...] | None:
        return await self._db.fetch_one(sql, params)

    async def migrate(self, statements: Any) -> None:
        await self._db.migrate(statements)

    async def close(self) -> None:
        await self._db.close()


# Neurons and periods


def test_neurons_follow_the_workers_ai_price() -> None:
    assert neurons_for(0.011) == pytest.approx(1000)
    spec = ModelSpec(
        id="@cf/test/priced",
        artifact=ArtifactRef(path="/x.gguf"),
        pricing=Pricing(input_per_million=1.1, output_per_million=2.2, cached_input_per_million=0.11),
    )
    cost, neurons = price(spec, 1_000_000, 500_000, 0)
    assert cost == pytest.approx(2.2)
    assert neurons == pytest.approx(200_000)
    assert price(spec, 1_000_000, 0, 1_000_000)[0] == pytest.approx(0.11)
    assert price(spec, 1_000_000, 500_000, 0, cache_hit=True) == (0.0, 0.0)
    assert billable_neurons(12_500, 10_000) == 2_500
    assert billable_neurons(9_000, 10_000) == 0


def test_periods_reset_at_utc_midnight_and_on_the_first() -> None:
    assert (utc_day(NOW), utc_month(NOW)) == (DAY, MONTH)
    assert seconds_to_next_day(NOW) == 6 * 3600
    assert seconds_to_next_month(NOW) == (17 * 24 + 6) * 3600
    new_year_eve = datetime(2025, 12, 31, 23, 0, tzinfo=UTC).timestamp()
    assert seconds_to_next_month(new_year_eve) == 3600


# The store


async def test_usage_is_grouped_by_day_model_and_token(store: UsageStore) -> None:
    account, token = unique("acct"), unique("tok")
    yesterday = NOW - 86400
    await store.write(
        [
            usage(account, token, neurons=10),
            usage(account, token, neurons=30, status=500),
            usage(account, token, neurons=0, cache="HIT"),
            usage(account, None, MODEL_B, neurons=5),
            usage(account, token, started_at=yesterday, neurons=7),
            usage(unique("other"), token, neurons=1000),
        ]
    )
    rows = await store.usage(account)
    assert [(r.day, r.model, r.token_id, r.requests) for r in rows] == [
        ("2025-03-13", MODEL_A, token, 1),
        (DAY, MODEL_A, token, 3),
        (DAY, MODEL_B, None, 1),
    ]
    today = rows[1]
    assert (today.errors, today.cache_hits, today.neurons) == (1, 1, 40)
    assert (today.prompt_tokens, today.completion_tokens, today.cached_tokens) == (60, 15, 12)
    assert today.cost_usd == pytest.approx(40 * 0.011 / 1000)
    assert today.as_dict()["token_id"] == token
    assert [r.model for r in await store.usage(account, model=MODEL_B)] == [MODEL_B]
    assert len(await store.usage(account, token_id=token)) == 2
    assert [r.day for r in await store.usage(account, since_day=DAY, until_day=DAY)] == [DAY, DAY]
    assert [r.day for r in await store.usage(account, until_day="2025-03-13")] == ["2025-03-13"]
    days = await store.days(account)
    assert [(d.day, d.requests, d.neurons) for d in days] == [("2025-03-13", 1, 7), (DAY, 4, 45)]
    assert await store.neurons_today(account, DAY) == 45
    assert await store.spend_this_month(token, MONTH) == pytest.approx(1047 * 0.011 / 1000)
    assert await store.neurons_today(account, "2025-03-15") == 0


async def test_a_record_written_twice_is_counted_once(store: UsageStore) -> None:
    account = unique("acct")
    records = [usage(account, neurons=10), usage(account, neurons=20)]
    await store.write(records)
    await store.write(records)
    await store.write([records[0], usage(account, neurons=5)])
    rows = await store.usage(account)
    assert (rows[0].requests, rows[0].neurons) == (3, 35)


async def test_same_request_id_from_a_caller_is_still_two_requests(store: UsageStore) -> None:
    account = unique("acct")
    first = usage(account)
    await store.write([first, replace(first, started_at=NOW + 1)])
    assert (await store.usage(account))[0].requests == 2


# The meter


async def test_pending_usage_counts_until_flushed(store: UsageStore, tmp_path: Path) -> None:
    account, token = unique("acct"), unique("tok")
    meter = Meter(store, tmp_path / "unwritten.jsonl", Clock())
    meter.record(usage(account, token, neurons=10))
    meter.record(usage(account, token, neurons=15))
    assert meter.pending_neurons(account, DAY) == 25
    assert meter.pending_spend(token, MONTH) == pytest.approx(25 * 0.011 / 1000)
    assert await store.neurons_today(account, DAY) == 0
    await meter.flush()
    assert meter.pending_neurons(account, DAY) == 0
    assert meter.pending_spend(token, MONTH) == 0
    assert await store.neurons_today(account, DAY) == 25


async def test_the_background_task_writes_batches_and_close_writes_the_rest(
    store: UsageStore, tmp_path: Path
) -> None:
    account = unique("acct")
    meter = Meter(store, tmp_path / "unwritten.jsonl", Clock(), flush_interval_s=60, batch_size=10)
    meter.start()
    for _ in range(10):  # a full batch wakes the writer before the interval
        meter.record(usage(account, neurons=1))
    for _ in range(100):
        if await store.neurons_today(account, DAY) == 10:
            break
        await asyncio.sleep(0.01)
    assert await store.neurons_today(account, DAY) == 10
    meter.record(usage(account, neurons=3))
    await meter.close()
    assert await store.neurons_today(account, DAY) == 13
    assert not (tmp_path / "unwritten.jsonl").exists()


async def test_a_failing_store_keeps_records_in_the_reconcile_file_until_replayed(
    metering_db: Database, store: UsageStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    account = unique("acct")
    path = tmp_path / "state" / "usage-unwritten.jsonl"
    failing = FailingDatabase(metering_db)
    meter = Meter(UsageStore(failing), path, Clock(), retries=2, backoff_s=0.001)
    meter.start()
    records = [usage(account, neurons=n) for n in (1, 2, 3)]
    for record in records:
        meter.record(record)
    with caplog.at_level(logging.ERROR, logger="cirrus.metering.meter"):
        await meter.close()
    assert failing.attempts == 3  # the first try and two retries
    assert "could not write 3 usage records" in caplog.text
    kept = [UsageRecord(**json.loads(line)) for line in path.read_text().splitlines()]
    assert kept == records
    assert meter.pending_neurons(account, DAY) == 6  # still counted: the usage happened
    assert await store.neurons_today(account, DAY) == 0

    assert await Meter(UsageStore(failing), path, Clock()).replay_unwritten() == 0
    assert list(path.parent.glob("*.replaying")), "a failed replay keeps its file"
    replaying = Meter(store, path, Clock())
    assert await replaying.replay_unwritten() == 3
    assert await store.neurons_today(account, DAY) == 6
    assert list(path.parent.iterdir()) == []
    assert await replaying.replay_unwritten() == 0


async def test_a_replay_keeps_unreadable_lines_aside(store: UsageStore, tmp_path: Path) -> None:
    account = unique("acct")
    path = tmp_path / "usage-unwritten.jsonl"
    path.write_text(json.dumps(usage(account, neurons=4).as_dict()) + "\n{torn line\n")
    assert await Meter(store, path, Clock()).replay_unwritten() == 1
    assert await store.neurons_today(account, DAY) == 4
    assert (tmp_path / "usage-unwritten.jsonl.rejected").read_text() == "{torn line\n"


async def test_a_record_after_close_is_kept_not_lost(store: UsageStore, tmp_path: Path) -> None:
    path = tmp_path / "usage-unwritten.jsonl"
    meter = Meter(store, path, Clock())
    await meter.close()
    late = usage(unique("acct"))
    meter.record(late)
    assert UsageRecord(**json.loads(path.read_text())) == late


# Budgets


def principal(account: str, token: str | None = None, limit: float | None = None) -> Principal:
    return Principal(account_id=account, token_id=token, token_name="t", monthly_spend_limit_usd=limit)


def guard_for(
    store: UsageStore, tmp_path: Path, clock: Clock, alerts: BudgetAlerts | None = None
) -> BudgetGuard:
    meter = Meter(store, tmp_path / f"{uuid.uuid4().hex}.jsonl", clock)
    return BudgetGuard(store, meter, default_daily_neurons=100, alerts=alerts, clock=clock)


async def test_a_free_account_is_refused_once_its_daily_allocation_is_used(
    store: UsageStore, tmp_path: Path
) -> None:
    clock = Clock()
    account = unique("acct")
    guard = guard_for(store, tmp_path, clock)
    await store.write([usage(account, neurons=60)])
    await guard.check(principal(account), "free", None)
    guard._meter.record(usage(account, neurons=40))  # not flushed yet, and still counted
    with pytest.raises(DailyAllocationExhausted) as refused:
        await guard.check(principal(account), "free", None)
    assert (refused.value.status, refused.value.code) == (429, 3036)
    assert refused.value.retry_after_s == 6 * 3600
    assert "daily free allocation of 100 neurons" in refused.value.message
    await guard.check(principal(account), "paid", None)  # beyond the allocation is billable
    await guard.check(principal(account), "free", 500)  # an account with its own allocation
    clock.now += 6 * 3600  # a new UTC day
    await guard.check(principal(account), "free", None)


async def test_a_token_is_refused_once_its_monthly_spend_limit_is_reached(
    store: UsageStore, tmp_path: Path
) -> None:
    clock = Clock()
    account, token = unique("acct"), unique("tok")
    guard = guard_for(store, tmp_path, clock)
    limited = principal(account, token, limit=0.01)
    await store.write([usage(account, token, neurons=500, started_at=NOW - 86400 * 5)])  # $0.0055
    await guard.check(limited, "paid", None)
    guard._meter.record(usage(account, token, neurons=500))
    with pytest.raises(SpendLimitReached) as refused:
        await guard.check(limited, "paid", None)
    assert (refused.value.status, refused.value.code) == (429, 3053)
    assert refused.value.retry_after_s == seconds_to_next_month(NOW)
    await guard.check(principal(account, unique("tok"), limit=0.01), "paid", None)  # another token
    await guard.check(principal(account, token), "paid", None)  # no limit


async def test_stored_totals_are_cached_briefly_but_own_writes_show_at_once(
    store: UsageStore, tmp_path: Path
) -> None:
    clock = Clock()
    account = unique("acct")
    guard = guard_for(store, tmp_path, clock)
    assert await guard.neurons_used(account, DAY) == 0
    await store.write([usage(account, neurons=50)])  # another gateway's usage
    assert await guard.neurons_used(account, DAY) == 0
    clock.now += 1.0
    assert await guard.neurons_used(account, DAY) == 50
    guard._meter.record(usage(account, neurons=5))
    await guard._meter.flush()
    assert await guard.neurons_used(account, DAY) == 55


# Alerts


class Webhook(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        self.server.received.append(json.loads(self.rfile.read(length)))  # type: ignore[attr-defined]
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    with serving(Webhook) as server:
        received: list[dict[str, Any]] = []
        server.received = received  # type: ignore[attr-defined]
        yield f"http://127.0.0.1:{server.server_address[1]}/alerts", received


async def test_each_threshold_is_announced_once_across_gateways(
    metering_db: Database,
    store: UsageStore,
    tmp_path: Path,
    webhook: tuple[str, list[dict[str, Any]]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    url, received = webhook
    clock = Clock()
    account, token = unique("acct"), unique("tok")
    gateways = [BudgetAlerts(metering_db, url, clock=clock) for _ in range(2)]
    await gateways[0].migrate()
    guards = [guard_for(store, tmp_path, clock, alerts) for alerts in gateways]
    limited = principal(account, token, limit=0.001)  # 0.001 USD is about 91 neurons

    async def check_all() -> None:
        for guard in guards:
            for _ in range(2):
                with contextlib.suppress(SpendLimitReached):
                    await guard.check(limited, "paid", None)
        for alerts in gateways:
            await alerts.drain()

    with caplog.at_level(logging.WARNING, logger="cirrus.metering.alerts"):
        await store.write([usage(account, token, neurons=55)])
        await check_all()
        assert sorted((a["scope"], a["threshold_percent"]) for a in received) == [
            ("daily_neurons", 50),
            ("monthly_spend", 50),
        ]
        await store.write([usage(account, token, neurons=50)])
        clock.now += 1.0  # past the totals cache
        await check_all()
    assert sorted((a["scope"], a["threshold_percent"]) for a in received) == [
        ("daily_neurons", 50),
        ("daily_neurons", 80),
        ("daily_neurons", 100),
        ("monthly_spend", 50),
        ("monthly_spend", 80),
        ("monthly_spend", 100),
    ]
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 6
    daily = next(a for a in received if a["scope"] == "daily_neurons" and a["threshold_percent"] == 100)
    assert daily["account_id"] == account
    assert (daily["period"], daily["limit"], daily["unit"]) == (DAY, 100, "neurons")
    spend = next(a for a in received if a["scope"] == "monthly_spend")
    assert (spend["token_id"], spend["period"], spend["unit"]) == (token, MONTH, "usd")
    for alerts in gateways:
        await alerts.close()


async def test_an_unreachable_webhook_is_logged_not_raised(
    metering_db: Database, store: UsageStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    account = unique("acct")
    alerts = BudgetAlerts(metering_db, "http://127.0.0.1:9/hooks/SECRET-PATH", timeout_s=0.5)
    await alerts.migrate()
    guard = guard_for(store, tmp_path, Clock(), alerts)
    await store.write([usage(account, neurons=60)])
    with caplog.at_level(logging.ERROR, logger="cirrus.metering.alerts"):
        await guard.check(principal(account), "free", None)
        await alerts.close()
    assert "the budget alert webhook at 127.0.0.1 failed: ConnectError" in caplog.text
    assert "SECRET-PATH" not in caplog.text  # a webhook's URL can be its secret


# The usage route and `cirrus usage`


class FakeAuth:
    """Stands in for the auth middleware: the bearer token names a principal."""

    def __init__(self, app: ASGIApp, principals: dict[str, Principal]) -> None:
        self.app = app
        self.principals = principals

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = dict(scope.get("headers", [])).get(b"authorization", b"").decode().removeprefix("Bearer ")
        if token in self.principals:
            scope.setdefault("state", {})["principal"] = self.principals[token]
        await self.app(scope, receive, send)


@pytest_asyncio.fixture(loop_scope="function")
async def identity(metering_db: Database) -> IdentityStore:
    """The accounts, on the usage's own database, as the gateway keeps them."""
    identities = IdentityStore(metering_db)
    await identities.migrate()
    return identities


@pytest_asyncio.fixture(loop_scope="function")
async def usage_server(store: UsageStore, identity: IdentityStore) -> AsyncIterator[tuple[str, str]]:
    """A real server on 127.0.0.1, in the test's own event loop (where the database was opened)."""
    account = unique("acct")
    reader = Principal(account_id=account, token_id="t-read", token_name="reader")
    runner = replace(reader, token_id="t-run", permissions=frozenset({Permission.RUN}))
    app = FastAPI()
    app.include_router(account_usage.router)
    install_handlers(app)
    app.state.platform = SimpleNamespace(
        usage_store=store,
        settings=Settings(daily_free_neurons=100),
        gateway=SimpleNamespace(identity=identity),
    )
    auth = FakeAuth(app, {"reader": reader, "runner": runner})
    server = uvicorn.Server(uvicorn.Config(auth, host="127.0.0.1", port=0, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    for _ in range(500):
        if server.started:
            break
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}", account
    server.should_exit = True
    await serving


async def test_the_usage_route_answers_in_the_workers_ai_envelope(
    store: UsageStore, usage_server: tuple[str, str]
) -> None:
    url, account = usage_server
    await store.write([usage(account, "t-read", neurons=80), usage(account, None, MODEL_B, neurons=70)])
    auth = {"Authorization": "Bearer reader"}
    async with httpx.AsyncClient(base_url=url, headers=auth) as client:
        own = (await client.get("/usage")).json()
        by_path = (
            await client.get(f"/client/v4/accounts/{account}/ai/usage", params={"model": MODEL_B})
        ).json()
        bad = await client.get("/usage", params={"since": "2025-02-30"})
        other = await client.get("/client/v4/accounts/someone-else/ai/usage")
        runner = await client.get("/usage", headers={"Authorization": "Bearer runner"})
    assert own["success"] is True
    result = own["result"]
    assert [(r["model"], r["token_id"], r["neurons"]) for r in result["rows"]] == [
        (MODEL_A, "t-read", 80),
        (MODEL_B, None, 70),
    ]
    assert result["days"] == [
        {
            "day": DAY,
            "requests": 2,
            "neurons": 150,
            "cost_usd": pytest.approx(150 * 0.011 / 1000),
            "free_neurons": 100,
            "billable_neurons": 50,
        }
    ]
    assert result["totals"]["requests"] == 2
    assert [r["model"] for r in by_path["result"]["rows"]] == [MODEL_B]
    assert by_path["result"]["days"][0]["neurons"] == 150  # the allocation covers the whole day
    assert bad.status_code == 400
    assert bad.json()["errors"][0]["code"] == 5006
    assert "'since'" in bad.json()["errors"][0]["message"]
    assert (other.status_code, runner.status_code) == (403, 403)


async def test_the_usage_route_uses_the_accounts_own_allocation(
    store: UsageStore, identity: IdentityStore, usage_server: tuple[str, str]
) -> None:
    url, account = usage_server
    await identity.create_account("Acme", Plan.PAID, account)
    await store.write([usage(account, "t-read", neurons=150)])

    async def day() -> tuple[float, float]:
        async with httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer reader"}) as client:
            (only,) = (await client.get("/usage")).json()["result"]["days"]
        return only["free_neurons"], only["billable_neurons"]

    assert await day() == (100, 50)  # the gateway's default
    await identity.set_daily_free_neurons(account, 120)
    assert await day() == (120, 30)
    await identity.set_daily_free_neurons(account, 0)
    assert await day() == (0, 150)
    await identity.set_plan(account, Plan.FREE)
    await identity.set_daily_free_neurons(account, 500)
    assert await day() == (500, 0)
    await identity.set_daily_free_neurons(account, 140)  # the request that crossed the line
    assert await day() == (140, 10)
    await identity.set_daily_free_neurons(account, None)
    assert await day() == (100, 50)


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="cirrus")
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.handler(args))


async def test_cirrus_usage_prints_a_table_or_json(
    store: UsageStore, usage_server: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, account = usage_server
    await store.write([usage(account, "t-read", neurons=80)])
    common = ["usage", "--url", url, "--token", "reader"]
    assert await asyncio.to_thread(run_cli, [*common, "--account", account, "--since", DAY]) == 0
    table = capsys.readouterr().out
    assert MODEL_A in table
    assert "80.0 neurons" in table
    assert await asyncio.to_thread(run_cli, [*common, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][0]["neurons"] == 80
    assert await asyncio.to_thread(run_cli, [*common, "--until", "yesterday"]) == 1
    assert "'until' must be a date" in capsys.readouterr().err
