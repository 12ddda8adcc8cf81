"""Budget reservations shared between gateways through the database they share.

Each gateway keeps its reservations in memory (reservations.py), so a burst through one gateway cannot race its
budget. Gateways that share a database would still each admit a request against the same allocation, so each
publishes what it holds, per budget key, to `budget_holds`, and every budget read adds what the other gateways
hold. Publishing runs in the background, at most once per `interval_s` and only when something changed (plus
a refresh of live rows every `refresh_s`): no write per request on the hot path, and no write at all while a
gateway holds nothing. So another gateway's reservation is seen `interval_s` plus the totals cache's TTL late;
rows a gateway left behind (it was killed) stop counting after `stale_s` and are deleted later.
"""

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable

from cirrus.db.database import Database
from cirrus.metering.reservations import Reservations

log = logging.getLogger(__name__)

BUDGET_HOLDS = """
CREATE TABLE IF NOT EXISTS budget_holds (
    gateway TEXT NOT NULL,
    what TEXT NOT NULL,
    subject TEXT NOT NULL,
    period TEXT NOT NULL,
    amount DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (gateway, what, subject, period)
)"""
BY_SUBJECT = "CREATE INDEX IF NOT EXISTS budget_holds_by_subject ON budget_holds (what, subject, period)"
UPSERT = (
    "INSERT INTO budget_holds (gateway, what, subject, period, amount, updated_at) VALUES (?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (gateway, what, subject, period) DO UPDATE SET amount = excluded.amount, "
    "updated_at = excluded.updated_at"
)
DELETE_ONE = "DELETE FROM budget_holds WHERE gateway = ? AND what = ? AND subject = ? AND period = ?"
ELSEWHERE = (
    "SELECT SUM(amount) FROM budget_holds "
    "WHERE what = ? AND subject = ? AND period = ? AND gateway <> ? AND updated_at >= ?"
)

Row = tuple[str, str, str]  # (what, subject, period)


class SharedHolds:
    def __init__(
        self,
        db: Database,
        reservations: Reservations,
        *,
        interval_s: float = 0.25,
        refresh_s: float = 5.0,
        stale_s: float = 30.0,
        read_every_s: float = 0.5,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self._reservations = reservations
        self.gateway = uuid.uuid4().hex
        self._interval_s = interval_s
        self._refresh_s = refresh_s
        self._stale_s = stale_s
        self._clock = clock
        self._published: dict[Row, float] = {}
        self._refreshed_at = 0.0
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        self._read_every_s = read_every_s
        self._elsewhere: dict[Row, tuple[float, float]] = {}  # key -> (read at, amount)

    async def migrate(self) -> None:
        await self._db.migrate([BUDGET_HOLDS, BY_SUBJECT])

    async def held_elsewhere(self, what: str, subject: str, period: str) -> float:
        """What the other gateways hold on this key (rows they refreshed within `stale_s`), read at most once per
        `read_every_s`: they publish every `interval_s` anyway, and a busy account's totals are re-read after
        each of this gateway's own writes, which says nothing about the others."""
        now = self._clock()
        key = (what, subject, period)
        cached = self._elsewhere.get(key)
        if cached is not None and now - cached[0] < self._read_every_s:
            return cached[1]
        row = await self._db.fetch_one(ELSEWHERE, (what, subject, period, self.gateway, now - self._stale_s))
        amount = float(row[0] or 0.0) if row else 0.0
        if len(self._elsewhere) > 10_000:
            self._elsewhere.clear()
        self._elsewhere[key] = (now, amount)
        return amount

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="cirrus-budget-holds")

    async def close(self) -> None:
        """Stop publishing and take this gateway's rows away: it holds nothing any more."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(Exception):
            await self._db.execute("DELETE FROM budget_holds WHERE gateway = ?", (self.gateway,))

    async def publish(self) -> None:
        """Write the keys whose holds changed, delete those no longer held, and refresh the rest now and then."""
        now = self._clock()
        current = self._current()
        refresh = now - self._refreshed_at >= self._refresh_s
        # In key order: gateways upserting at once lock rows in one order, so they cannot deadlock.
        changed = sorted((k, v) for k, v in current.items() if refresh or self._published.get(k) != v)
        gone = [k for k in self._published if k not in current]
        if changed:
            await self._db.execute_many(UPSERT, [(self.gateway, *k, v, now) for k, v in changed])
        if gone:
            await self._db.execute_many(DELETE_ONE, [(self.gateway, *k) for k in gone])
        if refresh:
            self._refreshed_at = now
            if current:  # housekeeping for gateways that were killed; readers ignore their rows anyway
                await self._db.execute(
                    "DELETE FROM budget_holds WHERE updated_at < ?", (now - self._stale_s,)
                )
        self._published = current

    def _current(self) -> dict[Row, float]:
        rows = {("neurons", *k): v for k, v in self._reservations.neurons.snapshot().items()}
        rows.update({("spend", *k): v for k, v in self._reservations.spend.snapshot().items()})
        return rows

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.publish()
            except Exception as error:  # the database is down: keep trying, warn once
                if not self._failing:
                    self._failing = True
                    log.warning("could not publish budget reservations (%r); retrying", error)
                continue
            if self._failing:
                self._failing = False
                log.warning("budget reservations published again")
