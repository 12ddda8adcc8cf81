"""The last hour's traffic from the usage records, aggregated in SQL (one indexed range scan on started_at):
requests, errors, cold starts and 3040 (capacity) refusals, for one account or the whole node."""

from dataclasses import asdict, dataclass
from typing import Any

from cirrus.db.database import Database
from cirrus.errors import CapacityExceeded

WINDOW_S = 3600.0
# What the usage rollup counts as an error (metering/schema.py).
_ERROR = "status >= 400 OR error_code IS NOT NULL"


@dataclass(frozen=True)
class Traffic:
    window_s: float
    requests: int
    errors: int
    cold_starts: int
    capacity_refusals: int

    @property
    def requests_per_minute(self) -> float:
        return self.requests / (self.window_s / 60)

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "requests_per_minute": self.requests_per_minute,
            "error_rate": self.error_rate,
        }


async def last_hour(db: Database, now: float, account_id: str | None) -> Traffic:
    """`account_id` None: every account's (an admin's view)."""
    where, params = "started_at >= ?", list[object]([now - WINDOW_S])
    if account_id is not None:
        where, params = f"{where} AND account_id = ?", [*params, account_id]
    row = await db.fetch_one(
        f"SELECT COUNT(*), SUM(CASE WHEN {_ERROR} THEN 1 ELSE 0 END), SUM(cold_start), "
        "SUM(CASE WHEN error_code = ? THEN 1 ELSE 0 END) "
        f"FROM usage_events WHERE {where}",
        [CapacityExceeded.code, *params],
    )
    requests, errors, cold, refused = row or (0, 0, 0, 0)
    return Traffic(WINDOW_S, int(requests or 0), int(errors or 0), int(cold or 0), int(refused or 0))
