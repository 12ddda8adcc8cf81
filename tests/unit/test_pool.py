"""The pool's scheduling rules, on a fake runtime."""

import asyncio

import pytest

from cirrus.errors import CapacityExceeded, ModelTooLarge, RequestTimeout
from cirrus.pool import Pool
from cirrus.pool.instance import InstanceState
from tests.unit.fakes import FakeClock, FakeLauncher, spec

MB = 1024 * 1024
SMALL = spec("small", keep_alive_s=60)
LARGE = spec("large", keep_alive_s=60)
PINNED = spec("pinned", pinned=True)


def make_pool(
    budget: int = 1000 * MB, queue_size: int = 4, delay: float = 0.0
) -> tuple[Pool, FakeLauncher, FakeClock]:
    launcher = FakeLauncher({SMALL.id: 100 * MB, LARGE.id: 600 * MB, PINNED.id: 300 * MB}, delay)
    clock = FakeClock()
    return Pool(launcher, budget, queue_size, default_keep_alive_s=300, clock=clock), launcher, clock


def deadline(seconds: float = 5.0) -> float:
    return asyncio.get_running_loop().time() + seconds


async def test_first_request_cold_starts_and_the_next_reuses_the_warm_instance() -> None:
    pool, launcher, _ = make_pool()
    first = await pool.acquire(SMALL, deadline())
    first.release()
    second = await pool.acquire(SMALL, deadline())
    second.release()
    assert first.cold_start and not second.cold_start
    assert first.instance is second.instance
    assert len(launcher.launched) == 1


async def test_concurrent_requests_queue_behind_one_cold_start() -> None:
    pool, launcher, _ = make_pool(delay=0.05)

    async def one() -> bool:
        lease = await pool.acquire(SMALL, deadline())
        await asyncio.sleep(0.01)
        lease.release()
        return lease.cold_start

    colds = await asyncio.gather(*(one() for _ in range(4)))
    assert len(launcher.launched) == 1
    assert colds.count(True) == 1


async def test_a_request_that_starts_an_instance_holds_its_slot_and_waits_in_no_queue() -> None:
    """Counted in both, a node's report read one cold-starting request as two (one busy, one queued), and a
    placer sent the next request to a pull elsewhere rather than wait behind a queue that was not there."""
    pool, _, _ = make_pool(delay=0.05)
    starter = asyncio.ensure_future(pool.acquire(SMALL, deadline()))
    await asyncio.sleep(0.01)
    queued = asyncio.ensure_future(pool.acquire(SMALL, deadline()))
    await asyncio.sleep(0.01)
    [starting] = pool.statuses()
    assert starting.state == "starting" and starting.active_requests == 1
    assert pool.waiting(SMALL.id) == 1  # the second request only
    (await starter).release()
    (await queued).release()
    assert pool.waiting(SMALL.id) == 0


async def test_requests_queued_behind_a_cold_start_get_its_free_slots_as_soon_as_it_is_ready() -> None:
    """Nothing else happens in the pool meanwhile (no release, no watchdog tick): the start itself must wake them."""
    pool, launcher, _ = make_pool(delay=0.05)
    batched = spec("batched-start", parallel=4)
    launcher.sizes[batched.id] = 100 * MB
    first = asyncio.ensure_future(pool.acquire(batched, deadline()))
    await asyncio.sleep(0.01)  # the start is under way; these queue behind it
    queued = [asyncio.ensure_future(pool.acquire(batched, deadline())) for _ in range(3)]
    done, _ = await asyncio.wait(queued, timeout=0.5)
    assert len(done) == 3 and len(launcher.launched) == 1
    for lease in [await first, *(task.result() for task in queued)]:
        lease.release()


async def test_keep_alive_expiry_stops_the_instance_and_returns_its_memory() -> None:
    pool, launcher, clock = make_pool()
    (await pool.acquire(SMALL, deadline())).release()
    assert pool.used_bytes() == 100 * MB
    clock.advance(59)
    await pool.reap()
    assert len(pool.statuses()) == 1
    clock.advance(2)
    await pool.reap()
    assert pool.statuses() == [] and pool.used_bytes() == 0
    assert launcher.launched[0][1].stopped


async def test_per_request_keep_alive_overrides_the_model_default() -> None:
    pool, _, clock = make_pool()
    (await pool.acquire(SMALL, deadline())).release(keep_alive_s=5)
    clock.advance(6)
    await pool.reap()
    assert pool.statuses() == []


async def test_keep_alive_zero_unloads_as_soon_as_idle() -> None:
    pool, launcher, _ = make_pool()
    (await pool.acquire(SMALL, deadline())).release(keep_alive_s=0)
    for _ in range(10):
        await asyncio.sleep(0)
    assert pool.statuses() == []
    assert launcher.launched[0][1].stopped


async def test_pinned_models_never_expire() -> None:
    pool, _, clock = make_pool()
    (await pool.acquire(PINNED, deadline())).release()
    clock.advance(10_000_000)
    await pool.reap()
    assert [s.model for s in pool.statuses()] == [PINNED.id]
    assert pool.statuses()[0].expires_at is None


async def test_busy_instances_do_not_expire() -> None:
    pool, _, clock = make_pool()
    lease = await pool.acquire(SMALL, deadline())
    clock.advance(10_000)
    await pool.reap()
    assert len(pool.statuses()) == 1
    lease.release()


async def test_a_model_that_does_not_fit_evicts_idle_instances_least_recently_used_first() -> None:
    pool, launcher, clock = make_pool(budget=750 * MB)
    other = spec("other", keep_alive_s=60)
    launcher.sizes[other.id] = 100 * MB
    (await pool.acquire(SMALL, deadline())).release()
    clock.advance(1)
    (await pool.acquire(other, deadline())).release()
    clock.advance(1)
    (await pool.acquire(LARGE, deadline())).release()
    models = {s.model for s in pool.statuses()}
    assert models == {other.id, LARGE.id}, "the least recently used instance (SMALL) goes first"
    assert pool.used_bytes() <= pool.budget_bytes


async def test_busy_instances_are_not_evicted_so_the_request_waits_for_one_to_finish() -> None:
    pool, _, _ = make_pool(budget=650 * MB)
    busy = await pool.acquire(SMALL, deadline())
    waiter = asyncio.create_task(pool.acquire(LARGE, deadline()))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    busy.release()
    lease = await waiter
    assert lease.cold_start
    assert {s.model for s in pool.statuses()} == {LARGE.id}
    lease.release()


async def test_a_model_larger_than_the_budget_is_refused_at_once() -> None:
    pool, _, _ = make_pool(budget=500 * MB)
    with pytest.raises(ModelTooLarge, match="memory budget"):
        await pool.acquire(LARGE, deadline())


async def test_pinned_memory_is_not_available_to_other_models() -> None:
    pool, _, _ = make_pool(budget=800 * MB)
    (await pool.acquire(PINNED, deadline())).release()
    with pytest.raises(ModelTooLarge):
        await pool.acquire(LARGE, deadline())


async def test_a_full_queue_refuses_at_once_with_capacity_exceeded() -> None:
    pool, _, _ = make_pool(queue_size=2)
    holder = await pool.acquire(SMALL, deadline())
    waiters = [asyncio.create_task(pool.acquire(SMALL, deadline())) for _ in range(2)]
    await asyncio.sleep(0.01)
    with pytest.raises(CapacityExceeded) as refused:
        await pool.acquire(SMALL, deadline())
    assert refused.value.retry_after_s is not None
    holder.release()
    for waiter in waiters:
        (await waiter).release()


async def test_a_request_that_waits_past_its_deadline_is_refused_before_it_runs() -> None:
    pool, _, _ = make_pool()
    holder = await pool.acquire(SMALL, deadline())
    with pytest.raises(RequestTimeout):
        await pool.acquire(SMALL, deadline(0.05))
    assert pool.waiting(SMALL.id) == 0
    holder.release()


async def test_more_instances_start_up_to_max_instances_when_all_are_busy() -> None:
    pool, launcher, _ = make_pool()
    two = spec("two", max_instances=2)
    launcher.sizes[two.id] = 100 * MB
    first = await pool.acquire(two, deadline())
    second = await pool.acquire(two, deadline())
    third = asyncio.create_task(pool.acquire(two, deadline()))
    await asyncio.sleep(0.02)
    assert len(launcher.launched) == 2 and not third.done()
    first.release()
    (await third).release()
    second.release()


async def test_a_crashed_worker_is_removed_and_the_next_request_cold_starts() -> None:
    pool, launcher, _ = make_pool()
    (await pool.acquire(SMALL, deadline())).release()
    launcher.launched[0][1].crash()
    assert pool.statuses() == []
    lease = await pool.acquire(SMALL, deadline())
    assert lease.cold_start and len(launcher.launched) == 2
    lease.release()


async def test_a_failed_launch_frees_its_reservation() -> None:
    pool, launcher, _ = make_pool()
    launcher.fail_next = True
    with pytest.raises(RuntimeError):
        await pool.acquire(SMALL, deadline())
    assert pool.statuses() == [] and pool.used_bytes() == 0
    (await pool.acquire(SMALL, deadline())).release()


async def test_unload_stops_idle_instances_only() -> None:
    pool, _, _ = make_pool()
    (await pool.acquire(SMALL, deadline())).release()
    busy = await pool.acquire(LARGE, deadline())
    assert await pool.unload(SMALL.id) == 1
    assert await pool.unload(LARGE.id) == 0
    assert [s.model for s in pool.statuses()] == [LARGE.id]
    busy.release()


async def test_a_batching_instance_takes_as_many_requests_as_it_has_slots_before_scaling_out() -> None:
    pool, launcher, _ = make_pool()
    batched = spec("batched", parallel=3, max_instances=2)
    launcher.sizes[batched.id] = 100 * MB
    leases = [await pool.acquire(batched, deadline()) for _ in range(3)]
    assert len(launcher.launched) == 1 and len({lease.instance.id for lease in leases}) == 1
    fourth = await pool.acquire(batched, deadline())
    assert len(launcher.launched) == 2 and fourth.cold_start
    for lease in [*leases, fourth]:
        lease.release()


async def test_requests_with_the_same_affinity_key_go_to_the_same_instance() -> None:
    pool, launcher, _ = make_pool()
    batched = spec("batched", parallel=2, max_instances=2)
    launcher.sizes[batched.id] = 100 * MB
    first = await pool.acquire(batched, deadline(), affinity="alice")
    second = await pool.acquire(batched, deadline())
    third = await pool.acquire(batched, deadline())
    assert second.instance is first.instance and third.instance is not first.instance
    second.release()
    third.release()
    again = await pool.acquire(batched, deadline(), affinity="alice")
    assert again.instance is first.instance, "the least loaded instance is the other one, affinity wins"
    first.release()
    again.release()


async def test_decoding_instances_share_the_cores_between_them() -> None:
    launcher = FakeLauncher({SMALL.id: 100 * MB, LARGE.id: 100 * MB})
    pool = Pool(launcher, 1000 * MB, 4, default_keep_alive_s=300, clock=FakeClock(), cores=4)
    small = await pool.acquire(SMALL, deadline())
    small_worker = launcher.launched[0][1]
    assert small_worker.threads == [4]
    large = await pool.acquire(LARGE, deadline())
    large_worker = launcher.launched[1][1]
    assert small_worker.threads == [4, 2] and large_worker.threads == [2]
    small.release()
    assert large_worker.threads == [2, 4], "alone again, it gets every core back"
    large.release()


async def test_until_idle_waits_for_the_last_request_to_end() -> None:
    """What the spare workers' refill waits for, so it does not take the cores from a request."""
    pool, _, _ = make_pool(delay=0.02)
    await asyncio.wait_for(pool.until_idle(5), 1)  # idle: at once
    lease = await pool.acquire(SMALL, deadline())
    assert pool.busy()
    waiter = asyncio.ensure_future(pool.until_idle(5))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    lease.release()
    await asyncio.wait_for(waiter, 1)
    assert not pool.busy()


async def test_until_idle_gives_up_after_its_timeout() -> None:
    pool, _, _ = make_pool()
    lease = await pool.acquire(SMALL, deadline())
    await asyncio.wait_for(pool.until_idle(0.05), 1)
    assert pool.busy()
    lease.release()


# -- the watchdog and dead workers (issue 12) ------------------------------------------------------------------


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def test_the_watchdog_kills_a_hung_worker_and_the_next_request_cold_starts_a_new_instance() -> None:
    pool, launcher, _ = make_pool()
    (await pool.acquire(SMALL, deadline())).release()
    hung = launcher.launched[0][1]
    pool.watch()
    assert hung.watched == 1 and not hung.killed, "a healthy worker is only pinged"
    hung.hung = "answered no heartbeat for 3.0s"
    pool.watch()
    await settle()
    assert hung.killed and pool.statuses() == []
    lease = await pool.acquire(SMALL, deadline())
    assert lease.cold_start and lease.worker is not hung
    lease.release()


async def test_an_unresponsive_instance_gets_no_request_and_does_not_show_ready() -> None:
    pool, launcher, _ = make_pool()
    two = spec("two", max_instances=2)
    launcher.sizes[two.id] = 100 * MB
    (await pool.acquire(two, deadline())).release()
    late = launcher.launched[0][1]
    late.answering = False
    assert [s.state for s in pool.statuses()] == ["unresponsive"]
    lease = await pool.acquire(two, deadline())
    assert lease.cold_start and lease.worker is not late, "a second instance starts rather than wait on it"
    lease.release()
    late.answering = True
    assert sorted(s.state for s in pool.statuses()) == ["ready", "ready"]


async def test_with_no_room_for_another_instance_a_request_waits_for_the_replacement() -> None:
    pool, launcher, _ = make_pool()
    (await pool.acquire(SMALL, deadline())).release()
    late = launcher.launched[0][1]
    late.answering = False
    waiter = asyncio.create_task(pool.acquire(SMALL, deadline()))
    await asyncio.sleep(0.02)
    assert not waiter.done() and len(launcher.launched) == 1
    late.hung = "answered no heartbeat for 3.0s"
    pool.watch()
    lease = await asyncio.wait_for(waiter, 1)
    assert lease.cold_start and lease.worker is not late
    lease.release()


async def test_a_worker_that_exited_unnoticed_is_not_chosen() -> None:
    """The process is gone but its exit has not been handled yet (item 10 of issue 12)."""
    pool, launcher, _ = make_pool()
    two = spec("two", max_instances=2)
    launcher.sizes[two.id] = 100 * MB
    (await pool.acquire(two, deadline())).release()
    gone = launcher.launched[0][1]
    gone._alive = False  # no exit callback yet
    lease = await pool.acquire(two, deadline())
    assert lease.worker is not gone
    lease.release()


async def test_release_when_settled_waits_for_the_worker_to_confirm() -> None:
    pool, launcher, _ = make_pool()
    lease = await pool.acquire(SMALL, deadline())
    confirmed = asyncio.Event()
    worker = launcher.launched[0][1]

    async def settled(stream_id: str | None = None) -> None:
        await confirmed.wait()

    worker.settled = settled  # type: ignore[method-assign]
    released = lease.release_when_settled("r1")
    await asyncio.sleep(0.02)
    assert not released.done() and pool.statuses()[0].active_requests == 1
    confirmed.set()
    await asyncio.wait_for(released, 1)
    assert pool.statuses()[0].active_requests == 0


async def test_requests_queued_while_a_worker_was_late_are_served_once_it_answers_again() -> None:
    pool, launcher, _ = make_pool()
    (await pool.acquire(SMALL, deadline())).release()
    late = launcher.launched[0][1]
    late.answering = False
    waiter = asyncio.create_task(pool.acquire(SMALL, deadline(3)))
    await asyncio.sleep(0.02)
    assert not waiter.done()
    late.answering = True  # its pong arrived; nothing else happens in the pool
    pool.watch()
    lease = await asyncio.wait_for(waiter, 1)
    assert not lease.cold_start and lease.worker is late and len(launcher.launched) == 1
    lease.release()


async def test_a_cold_start_outlives_the_requester_that_left_and_serves_the_queue() -> None:
    """A load longer than one request's time limit still becomes ready, for the requests queued behind it."""
    pool, launcher, _ = make_pool(delay=0.2)
    waiting = asyncio.create_task(pool.acquire(SMALL, deadline(5)))
    with pytest.raises(RequestTimeout):
        await pool.acquire(SMALL, deadline(0.05))
    lease = await asyncio.wait_for(waiting, 2)
    assert launcher.starts == 1 and lease.instance.state is InstanceState.READY  # one load, not begun again
    lease.release()
    await settle()
    assert [status.active_requests for status in pool.statuses()] == [0]


async def test_a_start_whose_requester_left_and_that_failed_leaves_nothing_behind() -> None:
    pool, launcher, _ = make_pool(delay=0.1)
    launcher.fail_next = True
    with pytest.raises(RequestTimeout):
        await pool.acquire(SMALL, deadline(0.02))
    await asyncio.sleep(0.2)
    await settle()
    assert pool.statuses() == [] and pool.used_bytes() == 0


async def test_closing_the_pool_cancels_a_start_in_progress() -> None:
    pool, launcher, _ = make_pool(delay=5)
    with pytest.raises(RequestTimeout):
        await pool.acquire(SMALL, deadline(0.02))
    await asyncio.wait_for(pool.close(), 1)
    assert pool.statuses() == [] and launcher.launched == []


async def test_reject_if_busy_refuses_at_once_where_others_would_wait_for_a_slot() -> None:
    pool, launcher, _ = make_pool()
    held = await pool.acquire(SMALL, deadline(), reject_if_busy=True)  # a cold start it begins itself: served
    with pytest.raises(CapacityExceeded, match="busy"):
        await pool.acquire(SMALL, deadline(), reject_if_busy=True)
    waiting = asyncio.ensure_future(pool.acquire(SMALL, deadline()))
    await asyncio.sleep(0.01)
    assert not waiting.done()  # without the option the same request queues
    held.release()
    (await waiting).release()
    (await pool.acquire(SMALL, deadline(), reject_if_busy=True)).release()  # a free slot again
    assert len(launcher.launched) == 1
