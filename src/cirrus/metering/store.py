"""Usage in the database: each request's record, and the per-day totals that queries and budgets read."""

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from cirrus.db.database import Database, Params
from cirrus.metering.periods import month_bounds, utc_day
from cirrus.metering.record import UsageRecord
from cirrus.metering.schema import COUNTERS, EVENT_COLUMNS, usage_schema

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
class UsageDay:
    """One account's whole day, which the daily allocation applies to."""

    day: str
    requests: int
    neurons: float
    cost_usd: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def event_id(record: UsageRecord) -> str:
    """Derived from the whole record, so a record written twice is recognised (request ids come from callers)."""
    canonical = json.dumps(record.as_dict(), sort_keys=True, separators=(",", ":"))
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
