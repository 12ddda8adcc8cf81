"""The Overview's read models: the last hour's traffic in SQL over 10,000 usage records (both engines), TTFT
percentiles from the histogram over a window, and instances grouped by model and state."""

import math

import pytest

from cirrus.console.read_models.latency import SNAPSHOT_EVERY_S, WINDOW_S, Buckets, TtftWindow, quantile
from cirrus.console.read_models.node_status import group_instances
from cirrus.console.read_models.traffic import last_hour
from cirrus.db.database import Database
from cirrus.metering.store import UsageStore
from cirrus.pool.instance import InstanceStatus
from tests.unit.records import usage_record

NOW = 1_800_000_000.0
RECORDS = 10_000


async def test_the_last_hour_is_counted_in_sql_over_ten_thousand_records(database: Database) -> None:
    store = UsageStore(database)
    await store.migrate()
    records = []
    for i in range(RECORDS):
        inside = i % 4 != 0  # a quarter of the records are older than the hour
        records.append(
            usage_record(
                account_id="alpha" if i % 2 else "beta",
                started_at=NOW - (60.0 + i % 3000 if inside else WINDOW_S + 1 + i),
                status=429 if i % 10 == 1 else (500 if i % 10 == 3 else 200),
                error_code=3040 if i % 10 == 1 else (3000 if i % 10 == 3 else None),
                cold_start=i % 7 == 0,
            )
        )
    for start in range(0, RECORDS, 1000):
        await store.write(records[start : start + 1000])

    def expected(account: str | None) -> tuple[int, int, int, int]:
        counted = [r for r in records if r.started_at >= NOW - WINDOW_S and account in (None, r.account_id)]
        return (
            len(counted),
            sum(1 for r in counted if r.status >= 400),
            sum(1 for r in counted if r.cold_start),
            sum(1 for r in counted if r.error_code == 3040),
        )

    for account in (None, "alpha", "beta"):
        traffic = await last_hour(database, NOW, account)
        assert (traffic.requests, traffic.errors, traffic.cold_starts, traffic.capacity_refusals) == expected(
            account
        )
    everyone = await last_hour(database, NOW, None)
    assert everyone.requests == 7500
    assert everyone.requests_per_minute == pytest.approx(7500 / 60)
    assert everyone.error_rate == pytest.approx(everyone.errors / 7500)


async def test_no_traffic_is_zero_not_an_error(database: Database) -> None:
    await UsageStore(database).migrate()
    traffic = await last_hour(database, NOW, "nobody")
    assert (traffic.requests, traffic.errors, traffic.error_rate) == (0, 0, 0.0)


def test_a_quantile_is_interpolated_within_its_bucket() -> None:
    buckets = {0.1: 50.0, 0.5: 90.0, 1.0: 100.0, math.inf: 100.0}
    assert quantile(0.5, buckets) == pytest.approx(0.1)
    assert quantile(0.7, buckets) == pytest.approx(0.1 + 0.4 * 0.5)
    assert quantile(0.99, buckets) == pytest.approx(0.5 + 0.5 * 0.9)
    assert quantile(0.5, {0.1: 0.0, math.inf: 0.0}) is None
    assert quantile(0.99, {0.1: 0.0, math.inf: 10.0}) == pytest.approx(0.1)  # beyond the last finite bound


def test_the_ttft_window_forgets_what_is_older_than_an_hour() -> None:
    histogram: Buckets = {}
    window = TtftWindow(lambda: dict(histogram), NOW)
    histogram.update({0.1: 0.0, 1.0: 100.0, math.inf: 100.0})  # 100 slow answers in the first minutes
    first = window.percentiles(NOW + SNAPSHOT_EVERY_S)
    assert first.samples == 100 and first.p50_s is not None and first.p50_s > 0.1
    histogram.update({0.1: 100.0, 1.0: 200.0, math.inf: 200.0})  # then, an hour later, 100 fast ones
    later = window.percentiles(NOW + SNAPSHOT_EVERY_S + WINDOW_S)
    assert later.samples == 100
    assert later.p99_s is not None and later.p99_s <= 0.1
    assert later.window_s == pytest.approx(WINDOW_S)


def _status(model: str, state: str, memory: int, active: int) -> InstanceStatus:
    return InstanceStatus(
        id=f"{model}-{state}-{memory}",
        model=model,
        state=state,
        pid=None,
        memory_bytes=memory,
        rss_bytes=None,
        active_requests=active,
        parallel=4,
        threads=2,
        pinned=False,
        started_at=0.0,
        load_s=0.0,
        first_token_s=None,
        cold_start_phases={},
        idle_since=None,
        expires_at=None,
    )


def test_instances_are_grouped_by_model_and_state() -> None:
    statuses = [_status("b", "ready", 100, 1), _status("a", "ready", 10, 0), _status("b", "ready", 200, 3)]
    groups = group_instances([*statuses, _status("b", "starting", 50, 0)])
    assert [(g.model, g.state, g.count, g.memory_bytes, g.active_requests, g.slots) for g in groups] == [
        ("a", "ready", 1, 10, 0, 4),
        ("b", "ready", 2, 300, 4, 8),
        ("b", "starting", 1, 50, 0, 4),
    ]
