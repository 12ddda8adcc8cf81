"""The circuit breaker with a hand-moved clock."""

import asyncio

import pytest

from cirrus.resilience import BreakerOpen, BreakerState, CircuitBreaker


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def state_of(breaker: CircuitBreaker) -> BreakerState:
    """Read afresh each time (mypy would keep the first reading of the property)."""
    return breaker.state


def test_opens_after_the_failures_and_probes_once_after_the_reset_time() -> None:
    clock = Clock()
    breaker = CircuitBreaker("redis", failures_to_open=2, reset_after_s=3.0, clock=clock)
    breaker.failed()
    assert breaker.allow() and breaker.state is BreakerState.CLOSED
    breaker.failed()
    assert state_of(breaker) is BreakerState.OPEN and not breaker.allow()
    assert breaker.retry_after_s() == pytest.approx(3.0)
    clock.now += 3.0
    assert breaker.allow() and state_of(breaker) is BreakerState.HALF_OPEN
    assert not breaker.allow()  # one probe at a time
    breaker.succeeded()
    assert state_of(breaker) is BreakerState.CLOSED and breaker.allow()


def test_a_failed_probe_opens_it_again_for_a_whole_reset_period() -> None:
    clock = Clock()
    changes: list[BreakerState] = []
    breaker = CircuitBreaker("db", reset_after_s=2.0, clock=clock, on_change=lambda _, s: changes.append(s))
    breaker.failed()
    clock.now += 2.0
    assert breaker.allow()
    clock.now += 0.5
    breaker.failed()
    assert breaker.state is BreakerState.OPEN and not breaker.allow()
    assert breaker.retry_after_s() == pytest.approx(2.0)
    assert changes == [BreakerState.OPEN, BreakerState.HALF_OPEN, BreakerState.OPEN]


async def test_call_skips_while_open_and_counts_only_the_dependencys_failures() -> None:
    clock = Clock()
    breaker = CircuitBreaker("redis", clock=clock)

    async def caller_mistake() -> None:
        raise ValueError("bad key")

    async def down() -> None:
        raise ConnectionError("refused")

    with pytest.raises(ValueError):
        await breaker.call(caller_mistake, lambda e: isinstance(e, ConnectionError))
    assert breaker.state is BreakerState.CLOSED
    with pytest.raises(ConnectionError):
        await breaker.call(down, lambda e: isinstance(e, ConnectionError))
    with pytest.raises(BreakerOpen, match="redis is unavailable"):
        await breaker.call(down, lambda e: isinstance(e, ConnectionError))

    async def up() -> int:
        return 7

    clock.now += 2.0
    assert await breaker.call(up, lambda e: True) == 7
    assert breaker.state is BreakerState.CLOSED


async def test_a_probe_whose_caller_left_keeps_the_breaker_open() -> None:
    clock = Clock()
    breaker = CircuitBreaker("db", reset_after_s=2.0, clock=clock)
    breaker.failed()
    clock.now += 2.0

    async def hangs() -> None:
        await asyncio.sleep(3600)

    probe = asyncio.ensure_future(breaker.call(hangs, lambda e: True))
    await asyncio.sleep(0)
    probe.cancel()
    with pytest.raises(asyncio.CancelledError):
        await probe
    assert breaker.state is BreakerState.OPEN and not breaker.allow()
