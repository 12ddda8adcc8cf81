"""The meter: takes each request's usage record without waiting, and writes them in batches in the background.

A batch the store refuses is retried with backoff, then kept in the reconcile file (never lost); the next start
replays that file. Records not yet written stay counted in two ledgers, so budget checks see them at once.
"""

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from cirrus.metering.ledger import Ledger
from cirrus.metering.periods import utc_day, utc_month
from cirrus.metering.reconcile import ReconcileFile
from cirrus.metering.record import UsageRecord

log = logging.getLogger(__name__)


class UsageWriter(Protocol):
    async def write(self, records: Sequence[UsageRecord]) -> None: ...


class Meter:
    def __init__(
        self,
        store: UsageWriter,
        reconcile_path: Path,
        clock: Callable[[], float] = time.time,
        *,
        flush_interval_s: float = 0.2,
        batch_size: int = 100,
        retries: int = 3,
        backoff_s: float = 0.1,
    ) -> None:
        self._store = store
        self._file = ReconcileFile(reconcile_path)
        self._clock = clock
        self._interval = flush_interval_s
        self._batch_size = batch_size
        self._delays = [0.0] + [backoff_s * 2**n for n in range(retries)]
        self._queue: deque[UsageRecord] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._closed = False
        self.neurons = Ledger()  # (account id, day) -> neurons not yet written
        self.spend = Ledger()  # (token id, month) -> USD not yet written

    def record(self, record: UsageRecord) -> None:
        """Never blocks, never raises: a failing meter must not break an answer."""
        try:
            if self._closed:
                self._file.append([record])
                log.error(
                    "usage of request %s arrived after the meter closed; kept it in %s",
                    record.request_id,
                    self._file.path,
                )
                return
            self._queue.append(record)
            self._tally(record)
            if len(self._queue) >= self._batch_size:
                self._wake.set()
        except Exception:
            log.exception("could not meter request %s", record.request_id)

    def pending_neurons(self, account_id: str, day: str) -> float:
        return self.neurons.pending((account_id, day))

    def pending_spend(self, token_id: str, month: str) -> float:
        return self.spend.pending((token_id, month))

    async def replay_unwritten(self) -> int:
        """Write what an earlier run could not; call once at start, before `start()`."""
        return await self._file.replay(self._store.write)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="cirrus-meter")

    async def close(self) -> None:
        """Write (or keep in the reconcile file) everything recorded so far."""
        self._closing = True
        self._wake.set()
        if self._task is not None and not self._task.done():
            await self._task
        await self.flush()
        self._closed = True

    async def flush(self) -> None:
        while self._queue:
            await self._write(self._take(self._batch_size))
        self.neurons.drop_before(utc_day(self._clock()))
        self.spend.drop_before(utc_month(self._clock()))

    async def _run(self) -> None:
        try:
            while not self._closing:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._interval):
                        await self._wake.wait()
                self._wake.clear()
                await self._flush_guarded()
            await self._flush_guarded()
        except asyncio.CancelledError:
            self._keep_now(self._take(len(self._queue)))
            raise

    async def _flush_guarded(self) -> None:
        try:
            await self.flush()
        except Exception:  # a bug here must not stop metering for the life of the process
            log.exception("usage flush failed")

    async def _write(self, batch: list[UsageRecord]) -> None:
        error: Exception | None = None
        try:
            for delay in self._delays:
                await asyncio.sleep(delay)
                try:
                    await self._store.write(batch)
                except Exception as exc:
                    error = exc
                    continue
                self._settle(batch)
                return
        except asyncio.CancelledError:
            self._keep_now(batch)  # it may be stored already; a replay recognises it
            raise
        # The store is down: keep what waits behind this batch too, rather than retry each batch in turn.
        await self._keep([*batch, *self._take(len(self._queue))], error)

    def _take(self, count: int) -> list[UsageRecord]:
        return [self._queue.popleft() for _ in range(min(count, len(self._queue)))]

    async def _keep(self, records: list[UsageRecord], error: Exception | None) -> None:
        log.error(
            "could not write %d usage records (%r); keeping them in %s", len(records), error, self._file.path
        )
        try:
            await asyncio.to_thread(self._file.append, records)
        except Exception:
            self._log_lost(records)

    def _keep_now(self, records: list[UsageRecord]) -> None:
        if not records:
            return
        try:
            self._file.append(records)
        except Exception:
            self._log_lost(records)

    def _log_lost(self, records: list[UsageRecord]) -> None:
        """The last resort: the records themselves go to the log, for an operator to recover."""
        log.exception(
            "could not keep usage records in %s: %s", self._file.path, [r.as_dict() for r in records]
        )

    def _tally(self, record: UsageRecord) -> None:
        self.neurons.add((record.account_id, utc_day(record.started_at)), record.neurons)
        if record.token_id:
            self.spend.add((record.token_id, utc_month(record.started_at)), record.cost_usd)

    def _settle(self, batch: list[UsageRecord]) -> None:
        # Records kept in the reconcile file are never settled: they stay counted until their period ends.
        for record in batch:
            self.neurons.settle((record.account_id, utc_day(record.started_at)), record.neurons)
            if record.token_id:
                self.spend.settle((record.token_id, utc_month(record.started_at)), record.cost_usd)
