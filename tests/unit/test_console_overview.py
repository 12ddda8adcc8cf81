"""The Overview's read models: the last hour's traffic and TTFT percentiles in SQL over 10,000 usage records
(both engines), and instances grouped by model and state."""

import math

import pytest

from cirrus.console.read_models.latency import nearest_rank, ttft_last_hour
from cirrus.console.read_models.node_status import group_instances
from cirrus.console.read_models.traffic import WINDOW_S, last_hour
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


async def test_ttft_percentiles_of_the_last_hour_come_from_ten_thousand_usage_records(
    database: Database,
) -> None:
    store = UsageStore(database)
    await store.migrate()
    records = []
    for i in range(RECORDS):
        inside = i % 5 != 0  # a fifth are older than the hour
        records.append(
            usage_record(
                account_id="alpha" if i % 3 else "beta",
                started_at=NOW - (1.0 + i % 3500 if inside else WINDOW_S + 1 + i),
                ttft_ms=None if i % 11 == 0 else float((i * 7919) % 4001) / 4,  # no first token: not counted
            )
        )
    for start in range(0, RECORDS, 1000):
        await store.write(records[start : start + 1000])

    def expected(account: str | None) -> tuple[int, float, float]:
        times = sorted(
            r.ttft_ms / 1000
            for r in records
            if r.ttft_ms is not None and r.started_at >= NOW - WINDOW_S and account in (None, r.account_id)
        )
        return len(times), times[math.ceil(0.5 * len(times)) - 1], times[math.ceil(0.99 * len(times)) - 1]

    for account in (None, "alpha", "beta"):
        ttft = await ttft_last_hour(database, NOW, account)
        assert (ttft.samples, ttft.p50_s, ttft.p99_s) == expected(account)
        assert ttft.window_s == WINDOW_S
    everyone = await ttft_last_hour(database, NOW, None)
    assert everyone.samples == len([i for i in range(RECORDS) if i % 5 and i % 11])


async def test_ttft_with_one_answer_or_none(database: Database) -> None:
    store = UsageStore(database)
    await store.migrate()
    await store.write([usage_record(account_id="solo", started_at=NOW - 10, ttft_ms=None)])
    nothing = await ttft_last_hour(database, NOW, "solo")
    assert (nothing.samples, nothing.p50_s, nothing.p99_s) == (0, None, None)
    await store.write([usage_record(account_id="solo", started_at=NOW - 5, ttft_ms=250.0)])
    one = await ttft_last_hour(database, NOW, "solo")
    assert (one.samples, one.p50_s, one.p99_s) == (1, 0.25, 0.25)


@pytest.mark.parametrize(
    ("percent", "samples", "rank"),
    [(50, 1, 1), (99, 1, 1), (50, 2, 1), (50, 3, 2), (99, 100, 99), (99, 101, 100)],
)
def test_the_nearest_rank_is_counted_in_integers(percent: int, samples: int, rank: int) -> None:
    assert nearest_rank(percent, samples) == rank


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
