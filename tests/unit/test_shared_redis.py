"""The shared Redis's deadline and breaker, with a hand-moved clock and calls that stand in for Redis's answers
(a hang, a refused connection, a command's own error). No server: `run` only sees what the call does."""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from cirrus.errors import RateLimited
from cirrus.resilience import BreakerState
from cirrus.resilience.shared_redis import RedisUnavailable, SharedRedis
from tests.unit.fakes import FakeClock

URL = "redis://127.0.0.1:1/0"  # never dialled: every call here is a stand-in
TIMEOUT_S = 0.05
PROBE_AFTER_S = 2.0


class Calls:
    """Stand-ins for one Redis call; counts how many ran, so a skipped call shows."""

    def __init__(self) -> None:
        self.ran = 0

    async def answer(self) -> str:
        self.ran += 1
        return "PONG"

    async def hang(self) -> str:
        self.ran += 1
        await asyncio.sleep(60)  # a frozen server: only the deadline ends this
        return "never"

    async def refuse(self) -> str:
        self.ran += 1
        raise RedisConnectionError("Connection refused")

    async def wrong_type(self) -> str:
        self.ran += 1
        raise ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")

    async def limited(self) -> str:
        self.ran += 1
        raise RateLimited("over", limit="requests")


def shared(clock: FakeClock, changes: list[BreakerState] | None = None) -> SharedRedis:
    return SharedRedis(
        URL,
        timeout_s=TIMEOUT_S,
        probe_after_s=PROBE_AFTER_S,
        clock=clock,
        on_change=None if changes is None else lambda _, state: changes.append(state),
    )


async def unavailable(redis: SharedRedis, call: Callable[[], Awaitable[str]]) -> RedisUnavailable:
    with pytest.raises(RedisUnavailable) as raised:
        await redis.run(call)
    return raised.value


async def test_a_hang_costs_one_deadline_then_calls_are_skipped_without_running() -> None:
    redis, calls = shared(FakeClock()), Calls()
    started = time.monotonic()
    first = await unavailable(redis, calls.hang)
    assert time.monotonic() - started < 5.0  # bounded by the deadline (0.05 s), with a wide margin
    assert "no answer within the deadline" in str(first)
    assert redis.breaker.state is BreakerState.OPEN
    for _ in range(50):
        assert "skipped" in str(await unavailable(redis, calls.hang))
    assert calls.ran == 1


async def test_after_the_probe_time_one_call_probes_and_its_answer_closes_the_breaker() -> None:
    clock, calls, changes = FakeClock(), Calls(), list[BreakerState]()
    redis = shared(clock, changes)
    await unavailable(redis, calls.refuse)
    clock.advance(PROBE_AFTER_S - 0.01)
    await unavailable(redis, calls.answer)
    assert calls.ran == 1  # not yet due
    clock.advance(0.01)
    assert await redis.run(calls.answer) == "PONG"
    assert calls.ran == 2
    assert await redis.run(calls.answer) == "PONG"
    assert changes == [BreakerState.OPEN, BreakerState.HALF_OPEN, BreakerState.CLOSED]


async def test_a_failed_probe_skips_redis_for_another_whole_period() -> None:
    clock, calls = FakeClock(), Calls()
    redis = shared(clock)
    await unavailable(redis, calls.refuse)
    clock.advance(PROBE_AFTER_S)
    await unavailable(redis, calls.hang)  # the probe, frozen too
    clock.advance(PROBE_AFTER_S - 0.01)
    await unavailable(redis, calls.answer)
    assert calls.ran == 2 and redis.breaker.state is BreakerState.OPEN


async def test_concurrent_callers_behind_an_open_breaker_leave_one_probe() -> None:
    clock, calls = FakeClock(), Calls()
    redis = shared(clock)
    await unavailable(redis, calls.refuse)
    clock.advance(PROBE_AFTER_S)
    results = await asyncio.gather(*(redis.run(calls.hang) for _ in range(10)), return_exceptions=True)
    assert all(isinstance(result, RedisUnavailable) for result in results)
    assert calls.ran == 2  # the first failure and one probe; nine callers skipped


async def test_a_caller_that_leaves_opens_nothing_but_a_probe_that_leaves_waits_for_the_next() -> None:
    clock, calls = FakeClock(), Calls()
    redis = shared(clock)
    with_deadline = SharedRedis(URL, timeout_s=60.0, probe_after_s=PROBE_AFTER_S, clock=clock)
    left = asyncio.create_task(with_deadline.run(calls.hang))
    await asyncio.sleep(0.01)
    left.cancel()
    with pytest.raises(asyncio.CancelledError):
        await left
    assert with_deadline.breaker.state is BreakerState.CLOSED  # a client gone says nothing about Redis

    await unavailable(redis, calls.refuse)
    clock.advance(PROBE_AFTER_S)
    probe = asyncio.create_task(redis.run(calls.hang))
    await asyncio.sleep(0)
    probe.cancel()
    with pytest.raises(asyncio.CancelledError):
        await probe
    assert redis.breaker.state is BreakerState.OPEN
    await unavailable(redis, calls.answer)
    assert calls.ran == 3  # the hang, the refusal, the probe; the last call was skipped


async def test_a_command_s_own_error_falls_back_without_opening_the_breaker() -> None:
    redis, calls = shared(FakeClock()), Calls()
    assert "WRONGTYPE" in str(await unavailable(redis, calls.wrong_type))
    assert redis.breaker.state is BreakerState.CLOSED
    assert await redis.run(calls.answer) == "PONG"


async def test_errors_that_are_not_redis_s_pass_through_and_count_as_an_answer() -> None:
    redis, calls = shared(FakeClock()), Calls()
    with pytest.raises(RateLimited):
        await redis.run(calls.limited)
    assert redis.breaker.state is BreakerState.CLOSED


async def test_one_warning_when_an_outage_starts_and_one_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, calls = FakeClock(), Calls()
    redis = SharedRedis("redis://:s3cret@127.0.0.1:1/0", timeout_s=TIMEOUT_S, clock=clock)
    with caplog.at_level(logging.DEBUG, logger="cirrus.resilience.shared_redis"):
        for _ in range(3):  # a failure, then several probes that fail again
            await unavailable(redis, calls.refuse)
            for _ in range(5):
                await unavailable(redis, calls.refuse)
            clock.advance(PROBE_AFTER_S)
        await redis.run(calls.answer)
    warnings = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    assert len(warnings) == 2
    assert "127.0.0.1:1/0 unreachable (ConnectionError: Connection refused)" in warnings[0]
    assert "answers again" in warnings[1]
    assert all("s3cret" not in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize("url", ["memory://", "memcached://127.0.0.1:11211", "127.0.0.1:6379"])
def test_only_redis_urls_are_taken(url: str) -> None:
    with pytest.raises(ValueError, match="redis://"):
        SharedRedis(url)
