"""When a worker's idle time goes to idle work, on a fake clock."""

from cirrus.runtime.idle_work import IdleWork


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Work:
    def __init__(self, pieces: int) -> None:
        self.left = pieces
        self.done = 0

    def __call__(self) -> bool:
        if self.left == 0:
            return False
        self.left -= 1
        self.done += 1
        return True


def test_idle_work_waits_out_the_grace_then_goes_piece_by_piece_then_the_loop_blocks() -> None:
    clock, work = Clock(), Work(pieces=2)
    idle = IdleWork(clock, grace_s=0.5)  # times a float adds up exactly
    assert idle.wait_s(busy=True, work=work) == 0.0
    assert idle.wait_s(busy=False, work=work) == 0.5 and work.done == 0
    clock.now += 0.375
    assert idle.wait_s(busy=False, work=work) == 0.125 and work.done == 0
    clock.now += 0.125
    assert [idle.wait_s(busy=False, work=work) for _ in range(3)] == [0.0, 0.0, None]
    assert work.done == 2


def test_a_request_within_the_grace_starts_it_again() -> None:
    clock, work = Clock(), Work(pieces=1)
    idle = IdleWork(clock, grace_s=0.5)
    idle.wait_s(busy=False, work=work)
    clock.now += 0.375
    assert idle.wait_s(busy=True, work=work) == 0.0  # the next request came: nothing was saved for nothing
    clock.now += 0.25
    assert idle.wait_s(busy=False, work=work) == 0.5 and work.done == 0


def test_work_that_keeps_finding_more_stops_at_the_cap_until_the_engine_ran_again() -> None:
    clock, work = Clock(), Work(pieces=1000)
    idle = IdleWork(clock, grace_s=0.5, max_pieces=3)
    idle.wait_s(busy=False, work=work)
    clock.now += 0.5
    assert [idle.wait_s(busy=False, work=work) for _ in range(5)] == [0.0, 0.0, 0.0, None, None]
    assert work.done == 3
    idle.wait_s(busy=True, work=work)
    idle.wait_s(busy=False, work=work)
    clock.now += 0.5
    assert idle.wait_s(busy=False, work=work) == 0.0 and work.done == 4
