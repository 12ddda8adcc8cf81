"""Runs batch items in the background: claims them from the store, runs each through `execute`, writes back.

Items run as background work (`pool.background`): they take slots nothing interactive wants, and an interactive
request that has to wait preempts one. A preempted item goes back to the queue and runs again later from the
start; an item whose claim is lost (its lease lapsed while this gateway was stalled, and another claimed it)
is stopped and its result dropped: the store lets only the current claim finish an item, so several gateways
sharing a database never finish one twice.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from cirrus.batches.model import Claim, ItemState
from cirrus.batches.store import BatchStore
from cirrus.leased_claims import next_claim

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    state: ItemState  # succeeded or failed
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None


Preempt = Callable[[], None]
Execute = Callable[[Claim, Preempt], Awaitable[Outcome]]


class RetryLater(Exception):
    """The item could not run now for a reason that passes (a rate limit, a full queue, an unavailable
    dependency): it goes back to the queue after `after_s`, without an outcome."""

    def __init__(self, after_s: float) -> None:
        super().__init__(f"retry in {after_s:.0f}s")
        self.after_s = after_s


class _Stopped(Exception):
    """The item stopped without an outcome: preempted (back to the queue), or its claim was lost."""


@dataclass(frozen=True)
class RunnerSettings:
    concurrency: int = 4  # items in flight at once in this gateway
    lease_s: float = 60.0  # a claim lapses this long after its last renewal
    idle_s: float = 1.0  # with nothing to claim, look again after this long (sooner when poked)
    sweep_s: float = 60.0  # expire batches past their window, purge old ones
    keep_s: float = 30 * 86400.0  # finished batches are kept this long


class BatchRunner:
    def __init__(self, store: BatchStore, execute: Execute, holder: str, settings: RunnerSettings) -> None:
        self._store = store
        self._execute = execute
        self._holder = holder
        self._settings = settings
        self._slots = asyncio.Semaphore(settings.concurrency)
        self._wake = asyncio.Event()
        self._items: set[asyncio.Task[None]] = set()

    def poke(self) -> None:
        """New work was submitted: look for it now rather than after the idle wait."""
        self._wake.set()

    async def run(self) -> None:
        """Until cancelled; items in flight then go back to the queue."""
        sweeper = asyncio.create_task(self._sweep_periodically())
        try:
            while True:
                await self._slots.acquire()
                claim = await self._next_claim()
                task = asyncio.create_task(self._run_item(claim))
                self._items.add(task)
                task.add_done_callback(self._items.discard)
        finally:
            sweeper.cancel()
            for task in list(self._items):
                task.cancel()
            await asyncio.gather(sweeper, *self._items, return_exceptions=True)

    async def _next_claim(self) -> Claim:
        claim_next = partial(self._store.claim_next, self._holder, self._settings.lease_s)
        return await next_claim(claim_next, self._release, self._wake, self._settings.idle_s, "a batch item")

    async def _run_item(self, claim: Claim) -> None:
        try:
            outcome = await self._outcome(claim)
            if not await self._store.finish(
                claim, outcome.state, outcome.result, outcome.error, outcome.usage
            ):
                log.warning("batch item %s/%s was claimed elsewhere; its result is dropped", *_where(claim))
        except _Stopped:
            pass
        except RetryLater as retry:
            await asyncio.sleep(
                min(retry.after_s, self._settings.lease_s / 2)
            )  # the claim is not renewed meanwhile
            await self._release(claim)
        except asyncio.CancelledError:  # the runner is stopping: the item runs again elsewhere or later
            await asyncio.shield(self._release(claim))
            raise
        except Exception:
            log.exception("could not finish batch item %s/%s", *_where(claim))
        finally:
            self._slots.release()

    async def _outcome(self, claim: Claim) -> Outcome:
        """The item's outcome, or `_Stopped` once it was preempted (and released) or its claim lost."""

        def preempt() -> None:
            work.cancel("preempted")

        work = asyncio.create_task(self._execute_guarded(claim, preempt))
        renewer = asyncio.create_task(self._keep_claimed(claim, work))
        try:
            return await work
        except asyncio.CancelledError:
            if work.cancelled() and not _current_task_cancelling():
                if renewer.done():  # the claim was lost
                    raise _Stopped() from None
                await self._release(claim)
                raise _Stopped() from None
            raise
        finally:
            renewer.cancel()
            work.cancel()

    async def _execute_guarded(self, claim: Claim, preempt: Preempt) -> Outcome:
        try:
            return await self._execute(claim, preempt)
        except (asyncio.CancelledError, RetryLater):
            raise
        except Exception as error:  # a bug in one item fails that item, not the runner
            log.exception("batch item %s/%s failed", *_where(claim))
            return Outcome(
                ItemState.FAILED, error={"code": 3000, "message": f"{type(error).__name__}: {error}"}
            )

    async def _keep_claimed(self, claim: Claim, work: "asyncio.Task[Outcome]") -> None:
        """Renew the claim while the item runs; stop the work if the claim was lost."""
        current: Claim | None = claim
        while current is not None:
            await asyncio.sleep(self._settings.lease_s / 3)
            try:
                current = await self._store.renew(current, self._settings.lease_s)
            except Exception:
                log.exception("could not renew the claim on batch item %s/%s", *_where(claim))
                continue
        log.warning("lost the claim on batch item %s/%s; stopping it", *_where(claim))
        work.cancel("claim lost")

    async def _release(self, claim: Claim) -> None:
        try:
            await self._store.release(claim)
        except Exception:
            log.exception(
                "could not release batch item %s/%s; it runs again once its claim lapses", *_where(claim)
            )

    async def _sweep_periodically(self) -> None:
        while True:
            try:
                await self._store.expire()
                await self._store.purge(self._settings.keep_s)
            except Exception:
                log.exception("could not expire or purge batches")
            await asyncio.sleep(self._settings.sweep_s)


def _where(claim: Claim) -> tuple[str, int]:
    return claim.item.batch_id, claim.item.position


def _current_task_cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
