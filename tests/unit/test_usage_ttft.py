"""Time to first token in the usage records: the pipeline writes what the request really had (none for a
refusal or an answer that ended before its first token; the replay's for a cache hit), and the migration adds the
column to a usage table made before it, on both engines, keeping the old records and their event ids."""

import asyncio
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from cirrus.cache import CachedAnswer
from cirrus.db.database import Database, Params, Row
from cirrus.db.sqlite import SqliteDatabase
from cirrus.errors import CapacityExceeded, RateLimited
from cirrus.metering.schema import COLUMN_EXISTS, EVENT_COLUMNS, USAGE_EVENTS, usage_schema
from cirrus.metering.store import UsageStore, event_id, event_row
from cirrus.runtime.params import Usage
from tests.unit.records import usage_record
from tests.unit.test_gateway_billing import call, make_pipeline, request

OLD_COLUMNS = tuple(c for c in EVENT_COLUMNS if c != "ttft_ms")
OLD_USAGE_EVENTS = USAGE_EVENTS.replace(",\n    ttft_ms DOUBLE PRECISION", "")
OLD_INDEXES = (
    "CREATE INDEX usage_events_by_started_at ON usage_events (started_at)",
    "CREATE INDEX usage_events_by_account_started_at ON usage_events (account_id, started_at)",
    "CREATE INDEX usage_events_by_request_id ON usage_events (request_id)",
)
INDEX_NAMES = {
    "sqlite": "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'usage_events' AND sql IS NOT NULL",
    "postgresql": "SELECT indexname FROM pg_indexes WHERE tablename = 'usage_events' AND indexname LIKE '%by%'",
}


async def older_table(database: Database) -> None:
    """The usage tables as they were before ttft_ms."""
    await database.migrate([OLD_USAGE_EVENTS, *usage_schema(database.dialect)[1:], *OLD_INDEXES])


async def test_an_answer_records_the_time_its_first_token_came(tmp_path: Path) -> None:
    pipeline, parts = make_pipeline(tmp_path)
    await (await pipeline.run(call(), request())).collect()
    await pipeline.drain()
    (record,) = parts.meter.records
    assert record.ttft_ms is not None
    assert 0 < record.ttft_ms <= record.execution_s * 1000


async def test_a_refusal_and_an_answer_without_a_token_record_none(tmp_path: Path) -> None:
    pipeline, parts = make_pipeline(tmp_path)
    parts.limiter.refuse = True
    with pytest.raises(RateLimited):
        await pipeline.run(call(), request())
    parts.limiter.refuse = False
    parts.service.fail = CapacityExceeded("no capacity")  # fails after the prompt was read, before a token
    with pytest.raises(CapacityExceeded):
        await pipeline.run(call(), request())
    await pipeline.drain()
    assert [(r.status, r.ttft_ms) for r in parts.meter.records] == [(429, None), (429, None)]


async def test_a_cache_hit_records_its_replay_s_first_token(tmp_path: Path) -> None:
    pipeline, parts = make_pipeline(tmp_path)
    cached = CachedAnswer("hello there", "stop", Usage(40, 2), "@cf/test/billed", 0.0)

    async def lookup_key(key: str) -> CachedAnswer:
        await asyncio.sleep(0)
        return cached

    parts.cache = SimpleNamespace(key_for=lambda *a: "the-key", lookup_key=lookup_key)
    completion = await (await pipeline.run(call(), request())).collect()
    await pipeline.drain()
    assert completion.text == "hello there"
    (record,) = parts.meter.records
    assert record.cache_status == "HIT"
    assert record.ttft_ms is not None and record.ttft_ms > 0


async def test_the_migration_adds_the_column_to_an_older_table(database: Database) -> None:
    assert OLD_USAGE_EVENTS != USAGE_EVENTS
    await older_table(database)
    old = usage_record(account_id="acct", started_at=1_000.0)
    await database.execute(
        f"INSERT INTO usage_events ({', '.join(OLD_COLUMNS)}) VALUES ({', '.join('?' for _ in OLD_COLUMNS)})",
        event_row(old)[: len(OLD_COLUMNS)],
    )
    store = UsageStore(database)
    await store.migrate()
    await store.migrate()  # again, as every start does: nothing to add
    new = usage_record(account_id="acct", started_at=2_000.0, ttft_ms=123.5)
    await store.write([new, old])  # the old record again (a replay): skipped, as its event id is the same
    assert await store.recent_events("acct") == [new, old]
    (day,) = await store.usage("acct")
    assert day.requests == 2
    # The indexes made with ttft_ms replace the ones made before it.
    assert {row[0] for row in await database.fetch_all(INDEX_NAMES[database.dialect])} == {
        "usage_events_by_request_account",
        "usage_events_by_started_at_ttft",
        "usage_events_by_account_started_at_ttft",
    }


async def test_an_interrupted_concurrent_migration_is_not_an_error(database: Database) -> None:
    """Two processes found the column missing; the other added it first, so this one's ALTER fails."""
    await older_table(database)
    await UsageStore(database).migrate()
    late = MissesTheColumnOnce(database)
    await UsageStore(late).migrate()
    assert late.refused == (1 if database.dialect == "sqlite" else 0)  # PostgreSQL's ADD COLUMN IF NOT EXISTS
    record = usage_record(ttft_ms=5.0)
    await UsageStore(database).write([record])
    assert await UsageStore(database).recent_events(record.account_id) == [record]


PLANS: dict[str, tuple[str, list[object]]] = {
    "TTFT, node": (
        "SELECT ttft_ms FROM usage_events WHERE started_at >= ? AND ttft_ms IS NOT NULL ORDER BY ttft_ms",
        [0.0],
    ),
    "TTFT, account": (
        "SELECT ttft_ms FROM usage_events WHERE account_id = ? AND started_at >= ? AND ttft_ms IS NOT NULL "
        "ORDER BY ttft_ms",
        ["a", 0.0],
    ),
    "a request": ("SELECT status FROM usage_events WHERE request_id = ? AND account_id = ?", ["r", "a"]),
}


@pytest.mark.parametrize("query", list(PLANS))
async def test_sqlite_plans_use_the_indexes_meant_for_them(tmp_path: Path, query: str) -> None:
    """TTFT from the index alone; a request by its id, never by walking its account's records."""
    database = SqliteDatabase.open(str(tmp_path / "usage.db"))
    try:
        await older_table(database)  # an upgraded table: the old indexes were made, then replaced
        await UsageStore(database).migrate()
        sql, params = PLANS[query]
        plan = " ".join(
            str(step[-1]) for step in await database.fetch_all(f"EXPLAIN QUERY PLAN {sql}", params)
        )
        wanted = "usage_events_by_request_account" if query == "a request" else "COVERING INDEX"
        assert wanted in plan, plan
    finally:
        await database.close()


def test_a_record_without_ttft_keeps_the_event_id_it_had_before_the_column() -> None:
    record = usage_record(started_at=1_000.0)
    before = {k: v for k, v in record.as_dict().items() if k != "ttft_ms"}
    canonical = json.dumps(before, sort_keys=True, separators=(",", ":"))
    assert event_id(record) == hashlib.sha256(canonical.encode()).hexdigest()[:32]
    timed = usage_record(**{**record.as_dict(), "ttft_ms": 80.0})
    assert event_id(timed) != event_id(record)


class MissesTheColumnOnce:
    """The database as seen by a process that looked before the other one's ALTER landed."""

    def __init__(self, database: Database) -> None:
        self._database = database
        self.dialect = database.dialect
        self._looked = False
        self.refused = 0  # migrations the database refused

    async def fetch_one(self, sql: str, params: Params = ()) -> Row | None:
        if sql in COLUMN_EXISTS.values() and not self._looked:
            self._looked = True
            return (0,)
        return await self._database.fetch_one(sql, params)

    async def migrate(self, statements: Sequence[str]) -> None:
        try:
            await self._database.migrate(statements)
        except Exception:
            self.refused += 1
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._database, name)
