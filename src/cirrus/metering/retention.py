"""Usage retention: per-request usage rows older than the window are deleted; the per-day totals stay.

`usage_daily` is kept by a trigger that fires only AFTER INSERT on `usage_events` (metering/schema.py), so
deleting events never touches the totals that usage queries and budgets read. The rows go in small batches, so
neither engine holds a long lock (SQLite has one writer) while requests are being metered, and the job runs
once at start and then every `interval_s` in the background. A failure (the database is down) is logged and
tried again at the next interval: retention is housekeeping, never on a request's path.

The trade-off: events are deduplicated by their stored row (ON CONFLICT on `event_id`), so a record replayed
from the unwritten-usage file after its row was deleted would be counted again. The running meter replays that
file as soon as the database answers again (seconds to minutes after the fact), so a window of days leaves a wide
margin; that is why the window is counted in days.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from cirrus.config import Settings
from cirrus.db.database import Database

log = logging.getLogger(__name__)
DAY_S = 86_400.0
BATCH_ROWS = 5_000
DELETE_BATCH = (
    "DELETE FROM usage_events WHERE event_id IN "
    "(SELECT event_id FROM usage_events WHERE started_at < ? LIMIT ?)"
)


class UsageRetention:
    """Deletes `usage_events` rows that started more than `keep_days` ago; `keep_days` 0 keeps them forever."""

    def __init__(
        self,
        db: Database,
        keep_days: float,
        *,
        interval_s: float = 3600.0,
        clock: Callable[[], float] = time.time,
        batch_rows: int = BATCH_ROWS,
    ) -> None:
        self._db = db
        self._keep_s = keep_days * DAY_S
        self._interval_s = interval_s
        self._clock = clock
        self._batch_rows = batch_rows
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def started(cls, db: Database, settings: Settings) -> "UsageRetention":
        """The gateway's retention job, running in the background as the settings say."""
        retention = cls(db, settings.usage_retention_days, interval_s=settings.usage_retention_interval_s)
        retention.start()
        return retention

    @property
    def enabled(self) -> bool:
        return self._keep_s > 0

    async def apply_once(self) -> int:
        """Delete every expired row now, batch by batch; returns how many went."""
        if not self.enabled:
            return 0
        cutoff = self._clock() - self._keep_s
        deleted = 0
        while True:
            count = await self._db.execute(DELETE_BATCH, (cutoff, self._batch_rows))
            deleted += max(count, 0)
            if count < self._batch_rows:
                return deleted
            await asyncio.sleep(0)  # let metering writes between batches

    def start(self) -> None:
        """Run in the background: once now, then every interval. Does nothing when retention is off."""
        if self.enabled and self._task is None:
            self._task = asyncio.create_task(self._run(), name="usage-retention")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await self._apply_logged()
            await asyncio.sleep(self._interval_s)

    async def _apply_logged(self) -> None:
        try:
            deleted = await self.apply_once()
        except Exception:
            log.warning("could not delete expired usage rows; trying again later", exc_info=True)
            return
        if deleted:
            log.info("deleted %d usage rows older than %.0f days", deleted, self._keep_s / DAY_S)
