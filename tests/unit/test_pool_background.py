"""Background work (batch items) in the pool: free slots only, preempted by interactive requests that wait."""

import asyncio
import functools

import pytest

from cirrus.errors import RequestTimeout
from cirrus.pool import Lease, Pool
from tests.unit.fakes import FakeLauncher, spec

MB = 1024 * 1024
SMALL = spec("small", keep_alive_s=60)
LARGE = spec("large", keep_alive_s=60)
TWO_SLOTS = spec("two", keep_alive_s=60, parallel=2)


def make_pool(budget: int = 1000 * MB, queue_size: int = 4) -> tuple[Pool, FakeLauncher]:
    launcher = FakeLauncher({SMALL.id: 100 * MB, LARGE.id: 600 * MB, TWO_SLOTS.id: 100 * MB})
    return Pool(launcher, budget, queue_size, default_keep_alive_s=300), launcher


def deadline(seconds: float = 5.0) -> float:
    return asyncio.get_running_loop().time() + seconds


class Preemptions:
    """The background holder's side: counts the preemptions and gives the slot back, as a cancelled item does."""

    def __init__(self) -> None:
        self.leases: list[Lease] = []
        self.count = 0

    def callback(self) -> None:
        self.count += 1
        asyncio.get_running_loop().call_soon(
            lambda: self.leases[-1].release()
        )  # the lease may be in hand only then


async def test_background_work_takes_a_free_slot_and_cold_starts_when_nothing_else_wants_it() -> None:
    pool, launcher = make_pool()
    lease = await pool.acquire(SMALL, deadline(), preempt=lambda: None)
    assert lease.cold_start and len(launcher.launched) == 1
    lease.release()
    assert not (await pool.acquire(SMALL, deadline(), preempt=lambda: None)).cold_start


async def test_an_interactive_request_that_must_wait_preempts_background_work_and_gets_its_slot() -> None:
    pool, _ = make_pool()
    preemptions = Preemptions()
    preemptions.leases.append(await pool.acquire(SMALL, deadline(), preempt=preemptions.callback))
    other_background = asyncio.ensure_future(pool.acquire(SMALL, deadline(), preempt=lambda: None))
    interactive = await asyncio.wait_for(pool.acquire(SMALL, deadline()), 1)
    assert preemptions.count == 1 and not other_background.done()
    interactive.release()
    (await asyncio.wait_for(other_background, 1)).release()  # the slot comes back to background work after


async def test_background_work_waits_while_an_interactive_request_of_any_model_waits() -> None:
    pool, _ = make_pool()
    held = await pool.acquire(SMALL, deadline())
    queued = asyncio.ensure_future(pool.acquire(SMALL, deadline()))
    await asyncio.sleep(0.01)
    background = asyncio.ensure_future(pool.acquire(TWO_SLOTS, deadline(), preempt=lambda: None))
    await asyncio.sleep(0.01)
    assert not background.done()  # TWO_SLOTS could start, but SMALL's caller waits
    held.release()
    (await queued).release()
    (await asyncio.wait_for(background, 1)).release()


async def test_one_preemption_per_waiting_request() -> None:
    pool, _ = make_pool()
    slow: list[Lease] = []
    preempted: list[int] = []
    for index in range(2):
        slow.append(
            await pool.acquire(TWO_SLOTS, deadline(), preempt=functools.partial(preempted.append, index))
        )
    waiting = asyncio.ensure_future(pool.acquire(TWO_SLOTS, deadline()))
    await asyncio.sleep(0.01)
    assert preempted == [1]  # the newest; the other keeps running while it is enough
    slow[1].release()
    (await asyncio.wait_for(waiting, 1)).release()
    slow[0].release()


async def test_background_work_never_evicts_an_idle_instance_to_start() -> None:
    pool, launcher = make_pool(budget=650 * MB)
    (await pool.acquire(SMALL, deadline())).release()  # idle, evictable: an interactive LARGE would stop it
    with pytest.raises(RequestTimeout):
        await pool.acquire(LARGE, deadline(0.05), preempt=lambda: None)
    assert [status.model for status in pool.statuses()] == [SMALL.id]
    (await pool.acquire(LARGE, deadline())).release()
    assert len(launcher.launched) == 2


async def test_background_waiters_do_not_fill_the_interactive_queue() -> None:
    pool, _ = make_pool(queue_size=1)
    held = await pool.acquire(SMALL, deadline())
    background = [
        asyncio.ensure_future(pool.acquire(SMALL, deadline(), preempt=lambda: None)) for _ in range(3)
    ]
    await asyncio.sleep(0.01)
    queued = asyncio.ensure_future(pool.acquire(SMALL, deadline()))  # the queue still has its one place
    held.release()
    (await asyncio.wait_for(queued, 1)).release()
    for waiter in background:
        (await asyncio.wait_for(waiter, 1)).release()


async def test_background_work_that_cold_started_an_instance_a_request_now_waits_for_is_preempted() -> None:
    launcher = FakeLauncher({SMALL.id: 100 * MB}, 0.05)
    pool = Pool(launcher, 1000 * MB, 4, default_keep_alive_s=300)
    preempted: list[str] = []
    starting = asyncio.ensure_future(pool.acquire(SMALL, deadline(), preempt=lambda: preempted.append("now")))
    await asyncio.sleep(0.01)  # the background start is under way
    interactive = asyncio.ensure_future(pool.acquire(SMALL, deadline()))
    background = await starting
    assert preempted == ["now"]  # as soon as it holds the slot the waiting request wants
    background.release()
    (await asyncio.wait_for(interactive, 1)).release()


FOUR_SLOTS = spec("four", keep_alive_s=60, parallel=4)


async def test_beside_interactive_requests_background_work_keeps_half_the_slots() -> None:
    launcher = FakeLauncher({FOUR_SLOTS.id: 100 * MB})
    pool = Pool(launcher, 1000 * MB, 4, default_keep_alive_s=300)
    preempted: list[int] = []
    background = [
        await pool.acquire(FOUR_SLOTS, deadline(), preempt=functools.partial(preempted.append, n))
        for n in range(3)
    ]
    interactive = await pool.acquire(FOUR_SLOTS, deadline())  # the fourth slot was free
    assert preempted == [2]  # the newest beyond the share of 2 (slots 4 // 2)
    background[2].release()
    grow = asyncio.ensure_future(pool.acquire(FOUR_SLOTS, deadline(), preempt=lambda: None))
    await asyncio.sleep(0.01)
    assert not grow.done()  # a slot is free, but background work already holds its share
    interactive.release()
    (await asyncio.wait_for(grow, 1)).release()  # no interactive request left: it may use every slot
    for lease in background[:2]:
        lease.release()


SCALES_OUT = spec("scales", keep_alive_s=60, max_instances=2)


async def test_an_interactive_request_takes_a_background_slot_rather_than_start_another_instance() -> None:
    launcher = FakeLauncher({SCALES_OUT.id: 100 * MB})
    pool = Pool(launcher, 1000 * MB, 4, default_keep_alive_s=300)
    preemptions = Preemptions()
    preemptions.leases.append(await pool.acquire(SCALES_OUT, deadline(), preempt=preemptions.callback))
    waiting_background = asyncio.ensure_future(pool.acquire(SCALES_OUT, deadline(), preempt=lambda: None))
    await asyncio.sleep(0.01)
    assert not waiting_background.done()  # background work never scales a model out
    (await asyncio.wait_for(pool.acquire(SCALES_OUT, deadline()), 1)).release()
    assert preemptions.count == 1 and len(launcher.launched) == 1
    (await asyncio.wait_for(waiting_background, 1)).release()
