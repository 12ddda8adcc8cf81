"""The database guard with fakes and an injected clock: which errors mean "unavailable", the breaker that makes
callers skip a failed database (and only for an outage, never for a busy one), and the deadline that never waits
for a call that does not answer."""

import asyncio
import time

import pytest

from cirrus.db.guard import DatabaseGuard, DatabaseLimits, DeadlineExceeded, Verdict, within
from cirrus.errors import DependencyUnavailable
from cirrus.resilience import BreakerState


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Outage(Exception):
    """Stands for the engine's connection errors."""


class BadStatement(Exception):
    """Stands for a programming error: the database answered, the statement was wrong."""


class Busy(Exception):
    """Stands for a live server that cannot serve this call now (a deadlock, a statement timeout)."""


class NoConnection(Exception):
    """Stands for every pooled connection in use: the call never reached the server."""


def classify(error: BaseException) -> Verdict:
    verdicts: dict[type[BaseException], Verdict] = {
        Outage: Verdict.OUTAGE,
        Busy: Verdict.BUSY,
        NoConnection: Verdict.NOT_REACHED,
    }
    return verdicts.get(type(error), Verdict.CALLER)


class FakeDatabase:
    def __init__(self) -> None:
        self.calls = 0
        self.failure: Exception | None = None

    async def query(self) -> str:
        self.calls += 1
        if self.failure is not None:
            raise self.failure
        return "row"


LIMITS = DatabaseLimits(timeout_s=1.0, retry_after_s=3.0)


def state(guard: DatabaseGuard) -> BreakerState:
    """Read afresh each time (mypy would carry an earlier assertion's narrowing over)."""
    return guard.breaker.state


def guard_for(clock: Clock, limits: DatabaseLimits = LIMITS) -> DatabaseGuard:
    return DatabaseGuard(limits, classify, clock=clock)


async def opened_and_probe_due() -> tuple["Clock", "FakeDatabase", DatabaseGuard]:
    """A guard that an outage opened, at the time its probe is due."""
    clock, db = Clock(), FakeDatabase()
    guard = guard_for(clock)
    db.failure = Outage()
    with pytest.raises(DependencyUnavailable):
        await guard.run(db.query)
    clock.now += 3.0
    return clock, db, guard


async def test_an_outage_is_a_503_and_then_callers_skip_the_database() -> None:
    clock, db = Clock(), FakeDatabase()
    guard = guard_for(clock)
    db.failure = Outage("connection refused")
    with pytest.raises(DependencyUnavailable) as refused:
        await guard.run(db.query)
    assert (refused.value.status, refused.value.code) == (503, 3057)
    assert refused.value.retry_after_s == pytest.approx(3.0)
    assert isinstance(refused.value.__cause__, Outage)
    assert "connection refused" not in refused.value.message  # an engine's text may name the server
    assert guard.breaker.state is BreakerState.OPEN
    with pytest.raises(DependencyUnavailable) as skipped:
        await guard.run(db.query)
    assert db.calls == 1  # the open breaker did not ask the database
    assert skipped.value.retry_after_s == pytest.approx(3.0)
    clock.now += 1.0
    with pytest.raises(DependencyUnavailable) as later:
        await guard.run(db.query)
    assert later.value.retry_after_s == pytest.approx(2.0)  # the time left until the next probe
    assert db.calls == 1


async def test_one_probe_after_the_wait_and_its_success_closes_the_breaker() -> None:
    clock, db, guard = await opened_and_probe_due()
    with pytest.raises(DependencyUnavailable):
        await guard.run(db.query)  # the probe: still down
    assert (db.calls, guard.breaker.state) == (2, BreakerState.OPEN)
    clock.now += 3.0
    db.failure = None
    assert await guard.run(db.query) == "row"
    assert guard.breaker.state is BreakerState.CLOSED
    assert await guard.run(db.query) == "row"


async def test_a_bad_statement_stays_an_error_and_is_not_an_outage() -> None:
    clock, db = Clock(), FakeDatabase()
    guard = guard_for(clock)
    db.failure = BadStatement("syntax error at or near SELEC")
    for _ in range(3):
        with pytest.raises(BadStatement):
            await guard.run(db.query)
    assert guard.breaker.state is BreakerState.CLOSED
    db.failure = Outage()
    with pytest.raises(DependencyUnavailable):
        await guard.run(db.query)
    clock.now += 3.0
    db.failure = BadStatement()
    with pytest.raises(BadStatement):
        await guard.run(db.query)  # the probe: the database answered, so it is available
    assert guard.breaker.state is BreakerState.CLOSED


async def test_a_call_that_never_answers_is_abandoned_at_its_deadline() -> None:
    guard = guard_for(Clock(), DatabaseLimits(timeout_s=0.05, retry_after_s=3.0))
    cancelled = asyncio.Event()

    async def frozen() -> str:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await asyncio.sleep(0.5)  # a driver cleaning up slowly must not hold the caller
            cancelled.set()
            raise
        return "never"

    started = time.monotonic()
    with pytest.raises(DependencyUnavailable) as refused:
        await guard.run(frozen)
    assert time.monotonic() - started < 0.4
    assert isinstance(refused.value.__cause__, DeadlineExceeded)
    await asyncio.wait_for(cancelled.wait(), timeout=5)  # and the abandoned call was told to stop


async def test_a_longer_deadline_for_one_call() -> None:
    async def slow() -> str:
        await asyncio.sleep(0.1)
        return "done"

    guard = guard_for(Clock(), DatabaseLimits(timeout_s=0.01))
    assert await guard.run(slow, timeout_s=5.0) == "done"
    with pytest.raises(DependencyUnavailable):
        await guard.run(slow)


async def test_a_caller_that_leaves_cancels_its_call_and_a_lost_probe_keeps_the_breaker_open() -> None:
    _, _, guard = await opened_and_probe_due()
    reached = asyncio.Event()
    finished: list[str] = []

    async def hanging_probe() -> str:
        reached.set()
        try:
            await asyncio.sleep(3600)
        finally:
            finished.append("cancelled")
        return "never"

    caller = asyncio.ensure_future(guard.run(hanging_probe))
    await asyncio.wait_for(reached.wait(), timeout=5)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    await asyncio.sleep(0)
    assert finished == ["cancelled"]
    assert guard.breaker.state is BreakerState.OPEN  # no answer from the probe: wait for the next one


async def test_within_returns_the_result_or_raises_the_work_error() -> None:
    async def ok() -> int:
        return 7

    async def broken() -> int:
        raise Outage("refused")

    assert await within(ok, 1.0) == 7
    with pytest.raises(Outage):
        await within(broken, 1.0)


async def open_breaker(clock: Clock, db: FakeDatabase, guard: DatabaseGuard) -> None:
    """An outage opens the breaker; then the wait passes, so the next call is the probe."""
    db.failure = Outage()
    with pytest.raises(DependencyUnavailable):
        await guard.run(db.query)
    assert state(guard) is BreakerState.OPEN
    clock.now += LIMITS.retry_after_s


async def test_a_busy_database_refuses_that_call_only_and_leaves_the_breaker_closed() -> None:
    clock, db = Clock(), FakeDatabase()
    guard = guard_for(clock)
    db.failure = Busy("deadlock detected")
    for _ in range(3):
        with pytest.raises(DependencyUnavailable) as refused:
            await guard.run(db.query)
        assert (refused.value.status, refused.value.code) == (503, 3057)
        assert refused.value.retry_after_s == pytest.approx(LIMITS.retry_after_s)
        assert isinstance(refused.value.__cause__, Busy)
    assert state(guard) is BreakerState.CLOSED
    assert db.calls == 3  # every call asked the database: none was skipped
    db.failure = None
    assert await guard.run(db.query) == "row"


async def test_a_call_that_found_no_free_connection_refuses_that_call_only() -> None:
    clock, db = Clock(), FakeDatabase()
    guard = guard_for(clock)
    db.failure = NoConnection()
    with pytest.raises(DependencyUnavailable) as refused:
        await guard.run(db.query)
    assert isinstance(refused.value.__cause__, NoConnection)
    assert state(guard) is BreakerState.CLOSED
    db.failure = None
    assert await guard.run(db.query) == "row"


async def test_a_probe_that_finds_the_database_busy_closes_the_breaker() -> None:
    clock, db = Clock(), FakeDatabase()
    guard = guard_for(clock)
    await open_breaker(clock, db, guard)
    db.failure = Busy("canceling statement due to statement timeout")
    with pytest.raises(DependencyUnavailable):
        await guard.run(db.query)  # the probe: the server answered, so it is alive
    assert state(guard) is BreakerState.CLOSED
    db.failure = None
    assert await guard.run(db.query) == "row"
    assert db.calls == 3


async def test_a_probe_that_found_no_free_connection_waits_for_the_next_probe() -> None:
    clock, db = Clock(), FakeDatabase()
    guard = guard_for(clock)
    await open_breaker(clock, db, guard)
    db.failure = NoConnection()
    with pytest.raises(DependencyUnavailable):
        await guard.run(db.query)  # the probe never reached the server: no answer either way
    assert state(guard) is BreakerState.OPEN  # not stuck half-open: another probe after the wait
    assert guard.breaker.retry_after_s() == pytest.approx(LIMITS.retry_after_s)
    clock.now += LIMITS.retry_after_s
    db.failure = None
    assert await guard.run(db.query) == "row"
    assert state(guard) is BreakerState.CLOSED
