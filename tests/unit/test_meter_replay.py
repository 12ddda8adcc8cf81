"""The meter through a database outage, on a real SQLite store: what the store refused is kept in the unwritten
file and written by the running meter once the store is back (no restart), each record counted once."""

import asyncio
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cirrus.errors import DependencyUnavailable
from cirrus.metering.meter import Meter
from cirrus.metering.record import UsageRecord
from cirrus.metering.store import UsageStore
from tests.unit.records import usage_record

NOW = datetime(2025, 3, 14, 18, 0, tzinfo=UTC).timestamp()
DAY = "2025-03-14"
ACCOUNT = "acct"


class FlakyWriter:
    """The real store, or an unavailable one while `down`."""

    def __init__(self, store: UsageStore) -> None:
        self.store = store
        self.down = False

    async def write(self, records: Sequence[UsageRecord]) -> None:
        if self.down:
            raise DependencyUnavailable("The database is unavailable", retry_after_s=1.0)
        await self.store.write(records)


def usage(neurons: float) -> UsageRecord:
    return usage_record(neurons=neurons, account_id=ACCOUNT, started_at=NOW)


def meter_for(writer: FlakyWriter, path: Path, replay_after_s: float) -> Meter:
    return Meter(
        writer,
        path,
        lambda: NOW,
        flush_interval_s=0.02,
        retries=1,
        backoff_s=0.001,
        replay_after_s=replay_after_s,
    )


async def eventually(condition: Callable[[], object], timeout_s: float = 10.0) -> bool:
    """Poll a condition (sync or async), bounded in time."""
    for _ in range(int(timeout_s / 0.02)):
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return True
        await asyncio.sleep(0.02)
    return False


def unwritten(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}*"))


async def test_kept_records_are_replayed_by_the_running_meter_once_the_store_is_back(
    store: UsageStore, tmp_path: Path
) -> None:
    path = tmp_path / "state" / "usage-unwritten.jsonl"
    writer = FlakyWriter(store)
    meter = meter_for(writer, path, replay_after_s=0.05)
    meter.start()
    try:
        writer.down = True
        for neurons in (1, 2, 3):
            meter.record(usage(neurons))
        assert await eventually(path.exists)
        assert meter.pending_neurons(ACCOUNT, DAY) == 6  # still counted by budgets meanwhile
        assert await store.neurons_today(ACCOUNT, DAY) == 0
        await asyncio.sleep(0.2)  # replays keep failing while it is down; nothing is lost
        assert unwritten(path)
        writer.down = False

        async def stored() -> bool:
            return await store.neurons_today(ACCOUNT, DAY) == 6

        assert await eventually(stored), "the meter did not replay its file by itself"
        assert await eventually(lambda: not unwritten(path))
        assert meter.pending_neurons(ACCOUNT, DAY) == 0  # in the store now: not counted twice
        assert meter.pending_spend("tok", "2025-03") == pytest.approx(0, abs=1e-12)
        assert (await store.usage(ACCOUNT))[0].requests == 3
    finally:
        await meter.close()


async def test_the_first_write_after_an_outage_replays_at_once(store: UsageStore, tmp_path: Path) -> None:
    path = tmp_path / "usage-unwritten.jsonl"
    writer = FlakyWriter(store)
    meter = meter_for(writer, path, replay_after_s=3600)  # the timer alone would not replay within the test
    meter.start()
    try:
        writer.down = True
        meter.record(usage(5))
        assert await eventually(path.exists)
        writer.down = False
        meter.record(usage(7))

        async def stored() -> bool:
            return await store.neurons_today(ACCOUNT, DAY) == 12

        assert await eventually(stored)
        assert not unwritten(path)
        assert meter.pending_neurons(ACCOUNT, DAY) == 0
    finally:
        await meter.close()


async def test_records_an_earlier_run_kept_do_not_unsettle_this_runs_ledger(
    store: UsageStore, tmp_path: Path
) -> None:
    path = tmp_path / "usage-unwritten.jsonl"
    earlier = FlakyWriter(store)
    earlier.down = True
    first = meter_for(earlier, path, replay_after_s=3600)
    first.record(usage(4))
    await first.close()  # kept in the file, as a killed or failed run leaves it
    assert path.exists()

    writer = FlakyWriter(store)
    meter = meter_for(writer, path, replay_after_s=3600)
    meter.record(usage(10))  # this run's, not yet written
    assert await meter.replay_unwritten() == 1
    assert await store.neurons_today(ACCOUNT, DAY) == 4
    assert meter.pending_neurons(ACCOUNT, DAY) == 10  # the earlier run's record left this ledger alone
    await meter.close()
    assert await store.neurons_today(ACCOUNT, DAY) == 14
    assert meter.pending_neurons(ACCOUNT, DAY) == 0
