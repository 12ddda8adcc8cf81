"""TTFT p50 / p99 over the last hour, from the usage records' `ttft_ms`, for one account or the whole node.

Percentiles by nearest rank: of the hour's n first-token times, the one at rank ceil(q * n). PostgreSQL computes
them with `percentile_disc`. SQLite has no percentile function, so each is one `ORDER BY ttft_ms LIMIT 1 OFFSET k`
over the hour's rows, read from the nearer end of the order, so the sorter keeps at most half the rows (for the
p99, the slowest 1%). Both engines read the rows from an index on (started_at, ttft_ms), or on (account_id,
started_at, ttft_ms) for one account (metering/schema.py), so SQLite reads the index alone, never the rows.
"""

from dataclasses import asdict, dataclass
from typing import Any

from cirrus.console.read_models.traffic import WINDOW_S
from cirrus.db.database import Database

P50, P99 = 50, 99


@dataclass(frozen=True)
class Percentiles:
    window_s: float
    samples: int  # the requests in the window whose first token came
    p50_s: float | None
    p99_s: float | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def nearest_rank(percent: int, samples: int) -> int:
    """ceil(percent / 100 * samples), in integers (0.99 * 100 is not exactly 99 in floating point)."""
    return max(1, (percent * samples + 99) // 100)


async def ttft_last_hour(db: Database, now: float, account_id: str | None) -> Percentiles:
    """`account_id` None: every account's (an admin's view)."""
    where, params = "started_at >= ? AND ttft_ms IS NOT NULL", list[object]([now - WINDOW_S])
    if account_id is not None:
        where, params = f"account_id = ? AND {where}", [account_id, *params]
    if db.dialect == "postgresql":
        return await _postgres_percentiles(db, where, params)
    row = await db.fetch_one(f"SELECT COUNT(*) FROM usage_events WHERE {where}", params)
    samples = int(row[0]) if row else 0
    if samples == 0:
        return Percentiles(WINDOW_S, 0, None, None)
    p50 = await _at_rank(db, where, params, nearest_rank(P50, samples), samples)
    p99 = await _at_rank(db, where, params, nearest_rank(P99, samples), samples)
    return Percentiles(WINDOW_S, samples, p50, p99)


async def _postgres_percentiles(db: Database, where: str, params: list[object]) -> Percentiles:
    """PostgreSQL has the nearest-rank percentile built in (`percentile_disc`): one scan and one sort for both."""
    row = await db.fetch_one(
        f"SELECT COUNT(*), percentile_disc({P50 / 100}) WITHIN GROUP (ORDER BY ttft_ms), "
        f"percentile_disc({P99 / 100}) WITHIN GROUP (ORDER BY ttft_ms) FROM usage_events WHERE {where}",
        params,
    )
    samples, p50, p99 = row or (0, None, None)
    return Percentiles(WINDOW_S, int(samples), _seconds(p50), _seconds(p99))


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else float(ms) / 1000


async def _at_rank(db: Database, where: str, params: list[object], rank: int, samples: int) -> float | None:
    """The time at `rank` (1 = fastest), in seconds; None if the rows changed since they were counted so far
    that the rank is gone."""
    order, offset = ("ASC", rank - 1) if rank <= samples - rank + 1 else ("DESC", samples - rank)
    row = await db.fetch_one(
        f"SELECT ttft_ms FROM usage_events WHERE {where} ORDER BY ttft_ms {order} LIMIT 1 OFFSET ?",
        [*params, offset],
    )
    return None if row is None else float(row[0]) / 1000
