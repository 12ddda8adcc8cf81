"""The Logs page's read model on a real database (SQLite and PostgreSQL): the latest records newest first,
filters by model, token and status, paging back, and one request's records by its id."""

import pytest
import pytest_asyncio

from cirrus.console.read_models.logs import (
    FilterError,
    LogFilters,
    RequestLog,
    is_error,
    parse_status,
    utc_time,
)
from cirrus.db.database import Database
from cirrus.metering.store import UsageStore
from tests.unit.records import usage_record

T0 = 1_741_975_200.0  # 2025-03-14 18:00 UTC


@pytest_asyncio.fixture(loop_scope="function")
async def usage(database: Database) -> UsageStore:
    store = UsageStore(database)
    await store.migrate()
    return store


async def test_the_latest_records_come_first_and_page_back(usage: UsageStore) -> None:
    records = [usage_record(request_id=f"req-{n}", started_at=T0 + n) for n in range(7)]
    await usage.write([*records, usage_record(account_id="other", started_at=T0 + 100)])
    log = RequestLog(usage, page_size=3)

    first = await log.page(LogFilters("acct"))
    assert [r.request_id for r in first.records] == ["req-6", "req-5", "req-4"]
    assert first.older == T0 + 4
    second = await log.page(LogFilters("acct", before=first.older))
    assert [r.request_id for r in second.records] == ["req-3", "req-2", "req-1"]
    last = await log.page(LogFilters("acct", before=second.older))
    assert [r.request_id for r in last.records] == ["req-0"]
    assert last.older is None
    assert last.records[0] == records[0]  # every metered field read back as written


async def test_filters_by_model_token_and_status(usage: UsageStore) -> None:
    await usage.write(
        [
            usage_record(request_id="a-ok", model="@cf/test/alpha", token_id="t1", started_at=T0),
            usage_record(
                request_id="b-429", model="@cf/test/beta", status=429, error_code=3040, started_at=T0 + 1
            ),
            usage_record(
                request_id="a-500", model="@cf/test/alpha", token_id="t2", status=500, started_at=T0 + 2
            ),
            usage_record(request_id="b-none", model="@cf/test/beta", token_id=None, started_at=T0 + 3),
        ]
    )
    log = RequestLog(usage)

    async def ids(**filters: object) -> list[str]:
        page = await log.page(LogFilters("acct", **filters))  # type: ignore[arg-type]
        return [r.request_id for r in page.records]

    assert await ids(model="@cf/test/alpha") == ["a-500", "a-ok"]
    assert await ids(token_id="t2") == ["a-500"]
    assert await ids(status="error") == ["a-500", "b-429"]
    assert await ids(status="ok") == ["b-none", "a-ok"]
    assert await ids(status=429) == ["b-429"]
    assert await ids(model="@cf/test/beta", status="ok") == ["b-none"]


async def test_a_request_id_opens_its_records_in_its_account_only(usage: UsageStore) -> None:
    mine = usage_record(request_id="shared-id", started_at=T0)
    again = usage_record(request_id="shared-id", started_at=T0 + 5, status=499)
    theirs = usage_record(request_id="shared-id", account_id="other", started_at=T0 + 1)
    await usage.write([again, theirs, mine])
    log = RequestLog(usage)
    assert await log.request("acct", "shared-id") == [mine, again]
    assert await log.request("acct", "unknown") == []


def test_query_parameters_are_parsed_and_refused_plainly() -> None:
    filters = LogFilters.parse("acct", {"model": "@cf/x/y", "status": "ERROR", "token": "", "before": "12.5"})
    assert filters == LogFilters("acct", "@cf/x/y", None, "error", 12.5)
    assert filters.query(before="3") == {
        "account": "acct",
        "model": "@cf/x/y",
        "status": "error",
        "before": "3",
    }
    assert parse_status("404") == 404
    for bad in ("teapot", "1000", "42"):
        with pytest.raises(FilterError):
            parse_status(bad)
    with pytest.raises(FilterError):
        LogFilters.parse("acct", {"before": "yesterday"})


def test_errors_and_times_read_as_the_daily_totals_count_them() -> None:
    assert is_error(usage_record(status=200, error_code=3040))
    assert is_error(usage_record(status=499))
    assert not is_error(usage_record(status=200))
    assert utc_time(T0 + 0.25) == "2025-03-14 18:00:00.250"
