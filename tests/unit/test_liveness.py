"""The watchdog's rules for a worker's heartbeats and progress, on an injected clock."""

from cirrus.runtime.liveness import Liveness
from tests.unit.fakes import FakeClock


def liveness(timeout_s: float = 3.0, stall_s: float = 10.0) -> tuple[Liveness, FakeClock]:
    clock = FakeClock()
    return Liveness(timeout_s, stall_s, clock), clock


def tick(watch: Liveness, clock: FakeClock, busy: bool = False, seconds: float = 1.0) -> str | None:
    """One watchdog interval: time passes, the check runs, the next ping goes out."""
    clock.advance(seconds)
    reason = watch.check(busy)
    watch.pinged()
    return reason


def test_a_worker_that_answers_every_ping_stays_healthy() -> None:
    watch, clock = liveness()
    for step in range(20):
        assert tick(watch, clock, busy=True) is None
        watch.answered(steps=step)
        assert not watch.late


def test_an_unanswered_ping_makes_the_worker_late_at_the_next_check() -> None:
    watch, clock = liveness()
    tick(watch, clock)
    assert not watch.late
    assert tick(watch, clock) is None
    assert watch.late
    watch.answered(steps=0)
    assert not watch.late


def test_pings_unanswered_past_the_timeout_condemn_the_worker() -> None:
    watch, clock = liveness(timeout_s=3.0)
    tick(watch, clock)  # the first ping goes out
    assert tick(watch, clock) is None  # 1 s
    assert tick(watch, clock) is None  # 2 s
    reason = tick(watch, clock)  # 3 s
    assert reason is not None and "heartbeat" in reason


def test_one_late_check_after_the_loop_itself_stalled_is_not_enough() -> None:
    """The server's loop was held up for 10 s: the ping it sent before had no chance to be answered in time."""
    watch, clock = liveness(timeout_s=3.0)
    tick(watch, clock)
    assert tick(watch, clock, seconds=10.0) is None
    assert watch.late
    watch.answered(steps=0)
    assert tick(watch, clock) is None and not watch.late


def test_a_busy_worker_that_answers_but_completes_no_step_is_stalled() -> None:
    watch, clock = liveness(stall_s=5.0)
    watch.answered(steps=7)
    for _ in range(4):
        assert tick(watch, clock, busy=True) is None
        watch.answered(steps=7)  # the reader thread answers; the step count never moves
    reason = tick(watch, clock, busy=True)
    assert reason is not None and "engine step" in reason


def test_an_idle_worker_is_never_stalled_and_its_stall_clock_starts_with_work() -> None:
    watch, clock = liveness(stall_s=5.0)
    for _ in range(30):
        assert tick(watch, clock, busy=False) is None
        watch.answered(steps=7)
    for _ in range(4):
        assert tick(watch, clock, busy=True) is None
        watch.answered(steps=7)


def test_progress_resets_the_stall_clock() -> None:
    watch, clock = liveness(stall_s=5.0)
    for step in range(30):
        assert tick(watch, clock, busy=True) is None
        watch.answered(steps=step // 3)  # a step every 3 s: slow prompt chunks, still progress
