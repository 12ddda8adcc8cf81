"""Usage retention on a real database (SQLite and PostgreSQL): expired per-request rows go, daily totals stay."""

import asyncio
import time
import uuid
from datetime import UTC, datetime

import pytest

from cirrus.config import Settings
from cirrus.db.database import Database
from cirrus.metering.record import UsageRecord
from cirrus.metering.retention import DAY_S, UsageRetention
from cirrus.metering.store import UsageStore
from tests.unit.records import usage_record

NOW = datetime(2025, 6, 30, 12, 0, tzinfo=UTC).timestamp()


def record(account: str, started_at: float, neurons: float = 10.0) -> UsageRecord:
    return usage_record(neurons=neurons, account_id=account, started_at=started_at)


async def event_times(db: Database, account: str) -> list[float]:
    rows = await db.fetch_all(
        "SELECT started_at FROM usage_events WHERE account_id = ? ORDER BY started_at", (account,)
    )
    return [float(row[0]) for row in rows]


async def seeded(database: Database) -> tuple[UsageStore, str, list[UsageRecord]]:
    store = UsageStore(database)
    await store.migrate()
    account = f"acct-{uuid.uuid4().hex[:8]}"
    ages_days = [40, 31, 29.5, 1, 0]
    records = [record(account, NOW - age * DAY_S, neurons=10.0 * (i + 1)) for i, age in enumerate(ages_days)]
    await store.write(records)
    return store, account, records


@pytest.mark.asyncio(loop_scope="function")
async def test_rows_older_than_the_window_go_and_daily_totals_stay(database: Database) -> None:
    store, account, records = await seeded(database)
    days_before = await store.days(account)
    rows_before = await store.usage(account)

    retention = UsageRetention(database, keep_days=30, clock=lambda: NOW, batch_rows=1)  # batch by batch
    assert await retention.apply_once() == 2

    assert await event_times(database, account) == sorted(r.started_at for r in records[2:])
    assert await store.days(account) == days_before  # the trigger fires on insert only
    assert await store.usage(account) == rows_before
    assert sum(day.neurons for day in days_before) == pytest.approx(150.0)
    assert await retention.apply_once() == 0  # nothing left to expire


@pytest.mark.asyncio(loop_scope="function")
async def test_a_zero_window_keeps_everything(database: Database) -> None:
    _, account, records = await seeded(database)
    retention = UsageRetention(database, keep_days=0, clock=lambda: NOW)
    assert not retention.enabled
    assert await retention.apply_once() == 0
    retention.start()  # does nothing when off
    await retention.close()
    assert len(await event_times(database, account)) == len(records)


@pytest.mark.asyncio(loop_scope="function")
async def test_the_gateway_job_applies_the_setting_once_at_start(database: Database) -> None:
    store = UsageStore(database)
    await store.migrate()
    account = f"acct-{uuid.uuid4().hex[:8]}"
    now = time.time()
    await store.write([record(account, now - 40 * DAY_S), record(account, now - DAY_S)])
    retention = UsageRetention.started(database, Settings(usage_retention_days=30))
    try:
        for _ in range(200):  # bounded: 10 s
            if len(await event_times(database, account)) == 1:
                break
            await asyncio.sleep(0.05)
    finally:
        await retention.close()
    assert await event_times(database, account) == [pytest.approx(now - DAY_S)]
    assert sum(day.requests for day in await store.days(account)) == 2
