"""Joining identical requests in flight: one leader runs the model, the others wait for its answer."""

import asyncio

import pytest

from cirrus.gateway.inflight import InFlight


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def _waiters(inflight: InFlight[str], key: str, count: int) -> list[asyncio.Task[str | None]]:
    return [asyncio.create_task(inflight.wait_for(key)) for _ in range(count)]


async def test_every_waiter_gets_the_leader_s_answer() -> None:
    inflight: InFlight[str] = InFlight()
    assert inflight.lead("k")
    waiters = _waiters(inflight, "k", 10)
    await _settle()
    assert not any(waiter.done() for waiter in waiters)
    inflight.resolve("k", "answer")
    assert await asyncio.wait_for(asyncio.gather(*waiters), timeout=5) == ["answer"] * 10
    assert len(inflight) == 0
    assert await inflight.wait_for("k") is None  # a finished flight is not a cache


async def test_waiting_on_a_key_nobody_leads_returns_none_at_once() -> None:
    inflight: InFlight[str] = InFlight()
    waiting = inflight.wait_for("nobody")
    with pytest.raises(StopIteration) as finished:
        waiting.send(None)  # completes on its first step, without suspending
    assert finished.value.value is None


async def test_an_abandoned_key_sends_its_waiters_to_run_themselves() -> None:
    inflight: InFlight[str] = InFlight()
    assert inflight.lead("k")
    waiters = _waiters(inflight, "k", 3)
    await _settle()
    inflight.abandon("k")
    assert await asyncio.wait_for(asyncio.gather(*waiters), timeout=5) == [None] * 3
    assert len(inflight) == 0
    assert inflight.lead("k")  # one of them may lead afresh
    inflight.abandon("k")


async def test_only_one_request_leads_a_key() -> None:
    inflight: InFlight[str] = InFlight()
    assert inflight.lead("a")
    assert not inflight.lead("a")
    assert inflight.lead("b")  # different keys run apart
    waiter = asyncio.create_task(inflight.wait_for("a"))
    await _settle()
    inflight.resolve("a", "first")  # the refused second lead did not replace the first leader's flight
    assert await asyncio.wait_for(waiter, timeout=5) == "first"
    inflight.abandon("b")


async def test_a_cancelled_waiter_leaves_the_leader_and_the_others_alone() -> None:
    inflight: InFlight[str] = InFlight()
    assert inflight.lead("k")
    quitter, stayer = _waiters(inflight, "k", 2)
    await _settle()
    quitter.cancel()
    await _settle()
    assert quitter.cancelled()
    assert len(inflight) == 1 and not inflight.lead("k")  # the leader still holds its key
    late = asyncio.create_task(inflight.wait_for("k"))
    await _settle()
    inflight.resolve("k", "answer")
    assert await asyncio.wait_for(stayer, timeout=5) == "answer"
    assert await asyncio.wait_for(late, timeout=5) == "answer"


async def test_len_counts_the_keys_in_flight() -> None:
    inflight: InFlight[str] = InFlight()
    assert len(inflight) == 0
    inflight.lead("a")
    inflight.lead("b")
    inflight.lead("a")
    assert len(inflight) == 2
    inflight.resolve("a", "answer")
    assert len(inflight) == 1
    inflight.abandon("b")
    inflight.abandon("b")  # settling a key nobody leads is harmless
    inflight.resolve("c", "answer")
    assert len(inflight) == 0


async def test_a_follower_stops_waiting_after_its_timeout() -> None:
    flights: InFlight[str] = InFlight()
    assert flights.lead("k")
    assert await flights.wait_for("k", timeout_s=0.01) is None  # runs the model itself
    flights.resolve("k", "answer")
