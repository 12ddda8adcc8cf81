"""A deadline and a circuit breaker around every database call, so an outage costs each caller little.

Why both: a stopped server refuses at once, but a frozen one (SIGSTOP, a network partition) never answers, and
without a client-side deadline every caller would wait for it. The deadline bounds one call; the breaker makes
the calls after a failure skip the database for `retry_after_s` rather than each wait out the deadline again,
then lets one call through as a probe.

An error is judged by what it says about the server (`Verdict`), because one breaker serves every caller: only a
server that is gone or silent (a refused connection, a shutdown, our own deadline) opens it. A live server that
cannot serve this one call (a statement past its timeout, a deadlock, a lock, every pooled connection in use)
answers that caller 503 / 3057 with `Retry-After` and nobody else; were it to open the breaker, one slow query
would refuse every uncached token for `retry_after_s`. Bad SQL or a constraint is the caller's error and stays as
it is. The open breaker is a `DependencyUnavailable` too.

The call runs in its own task. At its deadline the task is cancelled but not awaited: a database driver may
take seconds to clean up a connection whose server does not answer (psycopg tries to cancel the query), and
that must not hold the caller. The abandoned task finishes in the background.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from cirrus.errors import DependencyUnavailable
from cirrus.resilience import BreakerState, CircuitBreaker

log = logging.getLogger(__name__)
T = TypeVar("T")
# One failure opens the breaker: a call already retried a dropped connection before it fails, and callers that
# skip the database lose little (cached tokens and accounts, budgets from the last totals, usage kept aside),
# while a second failure before opening would make more requests wait out a deadline.
FAILURES_TO_OPEN = 1


@dataclass(frozen=True)
class DatabaseLimits:
    """How long the gateway waits for its database, and how hard it leans on it."""

    timeout_s: float = 2.0  # one call, end to end; only a silent server should reach it (an outage)
    pool_size: int = 10
    retry_after_s: float = 2.0  # how long the breaker skips the database after it failed
    on_change: Callable[[str, BreakerState], None] | None = None  # e.g. a metric of the breaker's state


class DeadlineExceeded(Exception):
    """The database did not answer within the call's deadline."""


class Verdict(Enum):
    """What a failed call says about the database, and so what the breaker makes of it."""

    CALLER = "caller"  # the database answered; the statement or its data was wrong: the caller's error
    BUSY = "busy"  # the database answered that it cannot do this call now: 503 for this caller only
    NOT_REACHED = "not_reached"  # the call never reached the database (no free connection): 503, no evidence
    OUTAGE = "outage"  # the database is gone or silent: 503, and the breaker opens


class DatabaseGuard:
    def __init__(
        self,
        limits: DatabaseLimits,
        classify: Callable[[BaseException], Verdict],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._limits = limits
        self._classify = classify
        self.breaker = CircuitBreaker(
            "database",
            failures_to_open=FAILURES_TO_OPEN,
            reset_after_s=limits.retry_after_s,
            clock=clock,
            on_change=_OutageLog(limits.on_change).changed,
        )

    async def run(self, work: Callable[[], Awaitable[T]], timeout_s: float | None = None) -> T:
        """Run `work` within the deadline; raise `DependencyUnavailable` when the database is unavailable."""
        if not self.breaker.allow():
            raise self._unavailable("the database failed recently and is not asked again yet")
        try:
            result = await within(work, self._limits.timeout_s if timeout_s is None else timeout_s)
        except asyncio.CancelledError:
            self._abandoned()
            raise
        except Exception as error:
            verdict = Verdict.OUTAGE if isinstance(error, DeadlineExceeded) else self._classify(error)
            self._record(verdict)
            if verdict is Verdict.CALLER:
                raise
            raise self._unavailable(_describe(error)) from error
        self.breaker.succeeded()
        return result

    def _record(self, verdict: Verdict) -> None:
        """Any answer from the server shows it alive and closes the breaker, a probe's included (a probe that hit
        a deadlock must not leave it half-open); a call that never reached the server is like a caller leaving."""
        if verdict is Verdict.OUTAGE:
            self.breaker.failed()
        elif verdict is Verdict.NOT_REACHED:
            self._abandoned()
        else:
            self.breaker.succeeded()

    def _abandoned(self) -> None:
        """The caller left (client gone, request deadline) or never got a connection: that says nothing about the
        database, unless this was the probe, whose answer will now never come; then wait for the next probe."""
        if self.breaker.state is BreakerState.HALF_OPEN:
            self.breaker.failed()

    def _unavailable(self, reason: str) -> DependencyUnavailable:
        retry_after_s = self.breaker.retry_after_s() or self._limits.retry_after_s
        return DependencyUnavailable(
            f"The database is unavailable ({reason}); try again shortly.", retry_after_s=retry_after_s
        )


async def within(work: Callable[[], Awaitable[T]], timeout_s: float) -> T:
    """`work()` if it completes within `timeout_s`, else DeadlineExceeded at once (its task is cancelled and left
    to finish on its own). A cancelled caller cancels the work the same way."""
    task = asyncio.ensure_future(work())
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
    except asyncio.CancelledError:
        _abandon(task)
        raise
    if not done:
        _abandon(task)
        raise DeadlineExceeded(f"no answer within {timeout_s:g}s")
    return task.result()


def _abandon(task: "asyncio.Future[Any]") -> None:
    task.cancel()
    task.add_done_callback(_collect)


def _collect(task: "asyncio.Future[Any]") -> None:
    """Retrieve an abandoned call's outcome, so asyncio does not report it as never retrieved."""
    with contextlib.suppress(BaseException):
        task.result()


def _describe(error: BaseException) -> str:
    """The error's kind, never its text: a connection error's text names the server's address."""
    if isinstance(error, DeadlineExceeded):
        return str(error)
    return type(error).__name__


class _OutageLog:
    """One line when the outage starts and one when it ends, not one per failed probe."""

    def __init__(self, listener: Callable[[str, BreakerState], None] | None = None) -> None:
        self._down = False
        self._listener = listener

    def changed(self, name: str, state: BreakerState) -> None:
        if self._listener is not None:
            self._listener(name, state)
        if state is BreakerState.OPEN and not self._down:
            log.warning("%s unavailable: calls to it fail fast until a probe succeeds", name)
        elif state is BreakerState.CLOSED and self._down:
            log.warning("%s available again", name)
        self._down = state is not BreakerState.CLOSED
