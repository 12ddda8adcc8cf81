"""The Usage page's read model on a real database (SQLite and PostgreSQL): figures summed by the database from
10,000 usage records written through the UsageStore, filters, and the allocation and monthly-limit gauges."""

import random
from collections import Counter, defaultdict
from datetime import UTC, datetime

import pytest
import pytest_asyncio

from cirrus.auth.store import IdentityStore, Plan
from cirrus.console.read_models.usage import FilterError, UsageFilters, UsageReader, by_model, period_days
from cirrus.db.database import Database
from cirrus.metering.periods import utc_day
from cirrus.metering.record import UsageRecord
from cirrus.metering.store import ModelDay, UsageStore
from tests.unit.records import usage_record

NOW = datetime(2025, 3, 14, 18, 0, tzinfo=UTC).timestamp()
DAY_S = 86_400.0
MODELS = ("@cf/test/alpha", "@cf/test/beta", "@cf/test/gamma")
RECORDS = 10_000


@pytest_asyncio.fixture(loop_scope="function")
async def stores(database: Database) -> tuple[UsageStore, IdentityStore]:
    usage, identity = UsageStore(database), IdentityStore(database, clock=lambda: NOW - 30 * DAY_S)
    await usage.migrate()
    await identity.migrate()
    return usage, identity


def spread_records(account: str, tokens: list[str | None], count: int) -> list[UsageRecord]:
    """`count` records over the last 10 days, three models, the given tokens; some errors and cache hits."""
    rng = random.Random(15)
    records = []
    for n in range(count):
        status = 429 if n % 17 == 0 else 200
        records.append(
            usage_record(
                account_id=account,
                token_id=rng.choice(tokens),
                model=rng.choice(MODELS),
                neurons=float(rng.randint(1, 20)),
                status=status,
                error_code=3040 if status == 429 else None,
                cache_status="HIT" if n % 5 == 0 else "MISS",
                started_at=NOW - rng.randint(0, 9) * DAY_S - rng.random() * 3600,
            )
        )
    return records


async def test_ten_thousand_records_are_summed_right(stores: tuple[UsageStore, IdentityStore]) -> None:
    usage, identity = stores
    account = await identity.create_account("acme", Plan.PAID)
    _, limited = await identity.create_token(account.id, "ci", monthly_spend_limit_usd=0.5)
    _, other = await identity.create_token(account.id, "dev")
    records = spread_records(account.id, [limited.id, other.id, None], RECORDS)
    await usage.write(records)
    await usage.write([usage_record(account_id="someone-else", started_at=NOW)])  # not this account's

    reader = UsageReader(usage, identity, default_free_neurons=10_000.0)
    report = await reader.report(UsageFilters.parse(account.id, {}, NOW), NOW)

    assert report.totals.requests == RECORDS
    assert report.totals.errors == sum(1 for r in records if r.status >= 400)
    assert report.totals.neurons == pytest.approx(sum(r.neurons for r in records))
    assert report.totals.cost_usd == pytest.approx(sum(r.cost_usd for r in records))
    assert report.days == period_days("2025-02-13", "2025-03-14")
    per_model = Counter(r.model for r in records)
    assert {model: sum(values) for model, values in report.requests_by_model.items()} == per_model
    assert list(report.requests_by_model) == [m for m, _ in per_model.most_common()]
    today = sum(r.neurons for r in records if utc_day(r.started_at) == utc_day(NOW))
    assert report.allocation.used == pytest.approx(today)
    assert report.allocation.limit == 10_000.0
    march = sum(
        r.cost_usd for r in records if r.token_id == limited.id and utc_day(r.started_at) >= "2025-03-01"
    )
    (gauge,) = report.token_limits
    assert gauge.used == pytest.approx(march)
    assert gauge.limit == 0.5

    keys = {(r.day, r.model, r.token_id) for r in report.rows}
    expected = {(utc_day(r.started_at), r.model, r.token_id) for r in records}
    assert keys == expected
    hits: dict[tuple[str, str, str | None], int] = defaultdict(int)
    for record in records:
        hits[(utc_day(record.started_at), record.model, record.token_id)] += record.cache_status == "HIT"
    assert {(r.day, r.model, r.token_id): r.cache_hits for r in report.rows} == hits


async def test_filters_narrow_the_figures(stores: tuple[UsageStore, IdentityStore]) -> None:
    usage, identity = stores
    account = await identity.create_account("acme")
    _, token = await identity.create_token(account.id, "ci")
    records = spread_records(account.id, [token.id, None], 500)
    await usage.write(records)
    reader = UsageReader(usage, identity, default_free_neurons=10_000.0)

    params = {"model": MODELS[1], "token": token.id, "since": "2025-03-10", "until": "2025-03-12"}
    report = await reader.report(UsageFilters.parse(account.id, params, NOW), NOW)

    chosen = [
        r
        for r in records
        if r.model == MODELS[1]
        and r.token_id == token.id
        and "2025-03-10" <= utc_day(r.started_at) <= "2025-03-12"
    ]
    assert report.totals.requests == len(chosen) > 0
    assert list(report.requests_by_model) == [MODELS[1]]
    assert report.days == ["2025-03-10", "2025-03-11", "2025-03-12"]
    assert report.neurons_by_model[MODELS[1]] == [
        pytest.approx(sum(r.neurons for r in chosen if utc_day(r.started_at) == day)) for day in report.days
    ]
    assert report.allocation.limit == 10_000.0  # the account's own allocation is unset: the default


async def test_an_account_allocation_of_its_own_is_the_gauge_limit(
    stores: tuple[UsageStore, IdentityStore],
) -> None:
    usage, identity = stores
    account = await identity.create_account("acme")
    await identity.set_daily_free_neurons(account.id, 250.0)
    await usage.write([usage_record(account_id=account.id, neurons=100.0, started_at=NOW)])
    report = await UsageReader(usage, identity, 10_000.0).report(UsageFilters.parse(account.id, {}, NOW), NOW)
    assert (report.allocation.used, report.allocation.limit, report.allocation.share) == (100.0, 250.0, 0.4)
    assert report.token_limits == []


def test_filters_default_to_the_last_thirty_days_and_refuse_bad_dates() -> None:
    filters = UsageFilters.parse("acct", {}, NOW)
    assert (filters.since, filters.until) == ("2025-02-13", "2025-03-14")
    assert filters.query() == {"account": "acct", "since": "2025-02-13", "until": "2025-03-14"}
    for params in (
        {"since": "14/03/2025"},
        {"since": "2025-03-15", "until": "2025-03-14"},
        {"since": "2020-01-01"},
    ):
        with pytest.raises(FilterError):
            UsageFilters.parse("acct", params, NOW)


def test_series_fill_days_without_usage_with_zero() -> None:
    days = ["2025-03-01", "2025-03-02", "2025-03-03"]
    entries = [ModelDay("2025-03-01", "b", 1, 0, 1.0, 0.0), ModelDay("2025-03-03", "a", 5, 0, 2.0, 0.0)]
    assert by_model(days, entries, "requests") == {"a": [0.0, 0.0, 5.0], "b": [1.0, 0.0, 0.0]}
