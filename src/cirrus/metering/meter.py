"""The meter: takes each request's usage record without waiting, and writes them in batches in the background.

A batch the store refuses is retried with backoff, then kept in the reconcile file (never lost). The background
task replays that file as soon as the store takes a write again (or, with no traffic, on a timer that backs off
while the store stays down), and every start replays what an earlier run left. Records not yet written stay
counted in two ledgers, so budget checks see them at once; records kept and then replayed leave the ledgers.

What a crash can lose: a record waits in memory for the next write, which begins at most `FLUSH_INTERVAL_S`
(0.2 s) after it was recorded, or at once when `BATCH_SIZE` (100) are waiting. With a journal (the gateway always
has one) each record is also appended to a local file as it is metered, so a SIGKILL loses nothing: the next start
recovers the journal into the reconcile file and replays it. Without one, a SIGKILL loses the records of the
requests that ended since the last write began (the last write batch). A graceful stop (SIGTERM, SIGINT) writes or
keeps everything either way.
"""

import asyncio
import contextlib
import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from cirrus.metering.journal import UsageJournal
from cirrus.metering.ledger import Ledger
from cirrus.metering.periods import utc_day, utc_month
from cirrus.metering.reconcile import ReconcileFile
from cirrus.metering.record import UsageRecord

log = logging.getLogger(__name__)
FLUSH_INTERVAL_S = 0.2
BATCH_SIZE = 100
REPLAY_MAX_WAIT_S = 30.0


class UsageWriter(Protocol):
    async def write(self, records: Sequence[UsageRecord]) -> None: ...


class Meter:
    def __init__(
        self,
        store: UsageWriter,
        reconcile_path: Path,
        clock: Callable[[], float] = time.time,
        *,
        flush_interval_s: float = FLUSH_INTERVAL_S,
        batch_size: int = BATCH_SIZE,
        retries: int = 3,
        backoff_s: float = 0.1,
        replay_after_s: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
        journal_dir: Path | None = None,
    ) -> None:
        """With `journal_dir`, every record is also appended to a journal there as it is metered (journal.py),
        and what a process that died abruptly left in it is recovered into the reconcile file now."""
        self._store = store
        self._file = ReconcileFile(reconcile_path)
        self._journal = None if journal_dir is None else UsageJournal(journal_dir)
        if self._journal is not None:
            self._journal.recover(self._file)
        self._lost = False  # records could be kept nowhere: the journal segment holding them is not discarded
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
        self._kept: Counter[UsageRecord] = Counter()  # kept in the file by this process, still in the ledgers
        self._monotonic = monotonic
        self._replay_after_s = replay_after_s
        self._replay_wait_s = replay_after_s  # doubles while replays fail, up to REPLAY_MAX_WAIT_S
        self._replay_at: float | None = None  # when the background task tries the file next; None: not needed

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
            if self._journal is not None:
                self._journal.append(record)
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
        """Write what could not be written before: by an earlier run (call this at start, before `start()`), or by
        this one while the store was down (the background task calls it again). Return how many were written."""
        failed = False

        async def write(records: Sequence[UsageRecord]) -> None:
            nonlocal failed
            try:
                await self._store.write(records)
            except Exception:
                failed = True
                raise
            self._settle_kept(records)

        written = await self._file.replay(write)
        self._schedule_replay(failed)
        return written

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
        if self._journal is not None and not self._lost:
            self._journal.close()

    async def flush(self) -> None:
        """Write (or keep) every queued record. The journal segment that held them goes once they are safe;
        records metered meanwhile are in the next segment (and written here too: a later replay of that segment
        is recognised by the store)."""
        segment = self._journal.rotate() if self._journal is not None and self._queue else None
        while self._queue:
            await self._write(self._take(self._batch_size))
        if segment is not None and self._journal is not None and not self._lost:
            self._journal.discard(segment)
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
                await self._replay_if_due()
            await self._flush_guarded()
        except asyncio.CancelledError:
            self._keep_now(self._take(len(self._queue)))
            raise

    async def _replay_if_due(self) -> None:
        if self._replay_at is None or self._monotonic() < self._replay_at:
            return
        try:
            await self.replay_unwritten()
        except Exception:  # a bug here must not stop metering either
            log.exception("usage replay failed")
            self._schedule_replay(failed=True)

    def _schedule_replay(self, failed: bool) -> None:
        if not failed:
            self._replay_at, self._replay_wait_s = None, self._replay_after_s
            return
        self._replay_at = self._monotonic() + self._replay_wait_s
        self._replay_wait_s = min(2 * self._replay_wait_s, REPLAY_MAX_WAIT_S)

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
                if self._replay_at is not None:  # the store takes writes again: replay what it refused
                    self._replay_at = min(self._replay_at, self._monotonic())
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
            return
        self._kept_in_file(records)

    def _keep_now(self, records: list[UsageRecord]) -> None:
        if not records:
            return
        try:
            self._file.append(records)
        except Exception:
            self._log_lost(records)
            return
        self._kept_in_file(records)

    def _kept_in_file(self, records: list[UsageRecord]) -> None:
        self._kept.update(records)
        if self._replay_at is None:
            self._replay_at = self._monotonic() + self._replay_wait_s

    def _settle_kept(self, records: Sequence[UsageRecord]) -> None:
        """Replayed records this process kept are in the store now: they leave the ledgers (records an earlier
        run kept were never in them)."""
        for record in records:
            if self._kept[record] > 0:
                self._kept[record] -= 1
                self._settle([record])
        self._kept = +self._kept  # drop the zero counts

    def _log_lost(self, records: list[UsageRecord]) -> None:
        """The last resort: the records themselves go to the log, for an operator to recover (and the journal
        keeps its segments, which the next start recovers)."""
        self._lost = True
        log.exception(
            "could not keep usage records in %s: %s", self._file.path, [r.as_dict() for r in records]
        )

    def _tally(self, record: UsageRecord) -> None:
        self.neurons.add((record.account_id, utc_day(record.started_at)), record.neurons)
        if record.token_id:
            self.spend.add((record.token_id, utc_month(record.started_at)), record.cost_usd)

    def _settle(self, batch: list[UsageRecord]) -> None:
        # Records kept in the reconcile file stay counted until a replay writes them (or their period ends).
        for record in batch:
            self.neurons.settle((record.account_id, utc_day(record.started_at)), record.neurons)
            if record.token_id:
                self.spend.settle((record.token_id, utc_month(record.started_at)), record.cost_usd)
