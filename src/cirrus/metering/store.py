"""Usage in the database: each request's record, and the per-day totals that queries and budgets read."""

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from cirrus.db.database import Database, Params
from cirrus.metering.periods import month_bounds, utc_day
from cirrus.metering.record import UsageRecord
from cirrus.metering.schema import (
    ADDED_EVENT_COLUMNS,
    COLUMN_EXISTS,
    COUNTERS,
    EVENT_COLUMNS,
    EVENT_INDEXES,
    add_event_column,
    usage_schema,
)

INSERT_EVENT = (
    f"INSERT INTO usage_events ({', '.join(EVENT_COLUMNS)}) VALUES ({', '.join('?' for _ in EVENT_COLUMNS)}) "
    "ON CONFLICT (event_id) DO NOTHING"
)


@dataclass(frozen=True)
class UsageRow:
    """One account's usage of one model through one token (None: no token) on one UTC day."""

    day: str
    model: str
    token_id: str | None
    requests: int
    errors: int
    cache_hits: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    neurons: float
    cost_usd: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ModelDay:
    """One account's usage of one model on one UTC day, over all its tokens (or the one filtered on)."""

    day: str
    model: str
    requests: int
    errors: int
    neurons: float
    cost_usd: float


@dataclass(frozen=True)
class UsageDay:
    """One account's whole day, which the daily allocation applies to."""

    day: str
    requests: int
    neurons: float
    cost_usd: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def event_id(record: UsageRecord) -> str:
    """Derived from the whole record, so a record written twice is recognised (request ids come from callers).
    A field added since records were first stored is left out while it is None, so a record journaled before
    the upgrade and replayed after it keeps its id."""
    fields = record.as_dict()
    for column, _ in ADDED_EVENT_COLUMNS:
        if fields[column] is None:
            del fields[column]
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def event_row(record: UsageRecord) -> Params:
    values = record.as_dict()
    values.update(
        event_id=event_id(record),
        day=utc_day(record.started_at),
        cold_start=int(record.cold_start),
        stream=int(record.stream),
    )
    return tuple(values[column] for column in EVENT_COLUMNS)


# Usage records read back: the stored columns but the two the store derives (`event_id`, `day`).
RECORD_COLUMNS = tuple(c for c in EVENT_COLUMNS if c not in ("event_id", "day"))
# What the rollup counts as an error (schema.ROLLUP); `ok` is the rest.
ERROR_CONDITION = "(status >= 400 OR error_code IS NOT NULL)"
StatusFilter = Literal["ok", "error"] | int | None


def _status_condition(status: StatusFilter) -> tuple[str, list[int]]:
    if status is None:
        return "", []
    if status == "ok":
        return f"NOT {ERROR_CONDITION}", []
    if status == "error":
        return ERROR_CONDITION, []
    return "status = ?", [int(status)]


def _filters(conditions: dict[str, str | None]) -> tuple[str, list[str]]:
    """`column = ?` for each condition that is set; a key that ends in its operator (`day >=`) uses that."""
    clauses, params = [], []
    for column, value in conditions.items():
        if value is not None:
            clauses.append(f"{column} ?" if column.endswith("=") else f"{column} = ?")
            params.append(value)
    return " AND ".join(clauses), params


class UsageStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def migrate(self) -> None:
        await self._db.migrate(usage_schema(self._db.dialect))
        for column, kind in ADDED_EVENT_COLUMNS:
            await self._add_column(column, kind)
        await self._db.migrate(EVENT_INDEXES)

    async def _add_column(self, column: str, kind: str) -> None:
        """Looked up first, so a table that has the column is not locked to add it (PostgreSQL's ALTER takes an
        exclusive lock even when IF NOT EXISTS makes it do nothing). Two SQLite processes may both find it
        missing: the loser's ALTER fails, and finding the column there then is success."""
        if await self._has_column(column):
            return
        try:
            await self._db.migrate([add_event_column(self._db.dialect, column, kind)])
        except Exception:
            if not await self._has_column(column):
                raise

    async def _has_column(self, column: str) -> bool:
        row = await self._db.fetch_one(COLUMN_EXISTS[self._db.dialect], (column,))
        return bool(row and row[0])

    async def write(self, records: Sequence[UsageRecord]) -> None:
        """One transaction; the daily totals follow by trigger, and records already stored are skipped. Records
        go in the order of the daily rows they add to, so gateways writing at once lock those rows in the same
        order and never deadlock."""
        if records:
            ordered = sorted(records, key=lambda r: (r.account_id, r.token_id or "", r.model, r.started_at))
            await self._db.execute_many(INSERT_EVENT, [event_row(r) for r in ordered])

    async def neurons_today(self, account_id: str, day: str) -> float:
        row = await self._db.fetch_one(
            "SELECT SUM(neurons) FROM usage_daily WHERE account_id = ? AND day = ?", (account_id, day)
        )
        return float(row[0] or 0.0) if row else 0.0

    async def spend_this_month(self, token_id: str, month: str) -> float:
        first, last = month_bounds(month)
        row = await self._db.fetch_one(
            "SELECT SUM(cost_usd) FROM usage_daily WHERE token_id = ? AND day BETWEEN ? AND ?",
            (token_id, first, last),
        )
        return float(row[0] or 0.0) if row else 0.0

    async def usage(
        self,
        account_id: str,
        *,
        token_id: str | None = None,
        model: str | None = None,
        since_day: str | None = None,
        until_day: str | None = None,
    ) -> list[UsageRow]:
        where, params = _filters(
            {
                "account_id": account_id,
                "token_id": token_id,
                "model": model,
                "day >=": since_day,
                "day <=": until_day,
            }
        )
        rows = await self._db.fetch_all(
            f"SELECT day, model, token_id, {', '.join(COUNTERS)} FROM usage_daily WHERE {where} "
            "ORDER BY day, model, token_id",
            params,
        )
        return [_usage_row(row) for row in rows]

    async def days(
        self, account_id: str, *, since_day: str | None = None, until_day: str | None = None
    ) -> list[UsageDay]:
        where, params = _filters({"account_id": account_id, "day >=": since_day, "day <=": until_day})
        rows = await self._db.fetch_all(
            f"SELECT day, SUM(requests), SUM(neurons), SUM(cost_usd) FROM usage_daily WHERE {where} "
            "GROUP BY day ORDER BY day",
            params,
        )
        return [UsageDay(str(r[0]), int(r[1]), float(r[2]), float(r[3])) for r in rows]

    async def model_days(
        self,
        account_id: str,
        *,
        token_id: str | None = None,
        model: str | None = None,
        since_day: str | None = None,
        until_day: str | None = None,
    ) -> list[ModelDay]:
        """Per day and model, the tokens summed: what a chart stacked by model draws."""
        where, params = _filters(
            {
                "account_id": account_id,
                "token_id": token_id,
                "model": model,
                "day >=": since_day,
                "day <=": until_day,
            }
        )
        rows = await self._db.fetch_all(
            "SELECT day, model, SUM(requests), SUM(errors), SUM(neurons), SUM(cost_usd) FROM usage_daily "
            f"WHERE {where} GROUP BY day, model ORDER BY day, model",
            params,
        )
        return [ModelDay(str(r[0]), str(r[1]), int(r[2]), int(r[3]), float(r[4]), float(r[5])) for r in rows]

    async def spend_by_token(self, account_id: str, month: str) -> dict[str, float]:
        """Each of an account's tokens' spend in a month (`YYYY-MM`), in USD; tokens that spent nothing are absent."""
        first, last = month_bounds(month)
        rows = await self._db.fetch_all(
            "SELECT token_id, SUM(cost_usd) FROM usage_daily "
            "WHERE account_id = ? AND token_id <> '' AND day BETWEEN ? AND ? GROUP BY token_id",
            (account_id, first, last),
        )
        return {str(r[0]): float(r[1]) for r in rows}

    async def recent_events(
        self,
        account_id: str,
        *,
        model: str | None = None,
        token_id: str | None = None,
        status: StatusFilter = None,
        before: float | None = None,
        limit: int = 100,
    ) -> list[UsageRecord]:
        """An account's latest usage records, newest first; `before` (a start time) pages further back."""
        where, params = _filters({"account_id": account_id, "model": model, "token_id": token_id})
        clauses: list[str] = [where]
        values: list[Any] = [*params]
        if before is not None:
            clauses.append("started_at < ?")
            values.append(before)
        condition, status_params = _status_condition(status)
        if condition:
            clauses.append(condition)
            values.extend(status_params)
        rows = await self._db.fetch_all(
            f"SELECT {', '.join(RECORD_COLUMNS)} FROM usage_events WHERE {' AND '.join(clauses)} "
            "ORDER BY started_at DESC, request_id LIMIT ?",
            [*values, limit],
        )
        return [_record(row) for row in rows]

    async def request_events(self, account_id: str, request_id: str) -> list[UsageRecord]:
        """The records of one request id in an account, oldest first (a caller may reuse an id)."""
        # Sorted here, not by ORDER BY, which would tempt SQLite to walk the account's index in start order
        # rather than look the id up in its own index (45 ms instead of 0.1 with 100,000 records).
        rows = await self._db.fetch_all(
            f"SELECT {', '.join(RECORD_COLUMNS)} FROM usage_events WHERE request_id = ? AND account_id = ?",
            (request_id, account_id),
        )
        return sorted((_record(row) for row in rows), key=lambda record: record.started_at)


def _record(row: tuple[Any, ...]) -> UsageRecord:
    values = dict(zip(RECORD_COLUMNS, row, strict=True))
    values.update(cold_start=bool(values["cold_start"]), stream=bool(values["stream"]))
    return UsageRecord(**values)


def _usage_row(row: tuple[Any, ...]) -> UsageRow:
    day, model, token_id, requests, errors, hits, prompt, completion, cached, neurons, cost = row
    return UsageRow(
        day=str(day),
        model=str(model),
        token_id=str(token_id) or None,
        requests=int(requests),
        errors=int(errors),
        cache_hits=int(hits),
        prompt_tokens=int(prompt),
        completion_tokens=int(completion),
        cached_tokens=int(cached),
        neurons=float(neurons),
        cost_usd=float(cost),
    )
