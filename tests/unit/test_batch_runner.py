"""The batch runner on a real store (SQLite and PostgreSQL): items run once each, a preempted item goes back to
the queue and runs again, a runner that stops gives its items back, and a lost claim's result is dropped."""

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from cirrus.batches import BatchStore, Claim, ItemState, NewItem
from cirrus.batches.runner import BatchRunner, Outcome, Preempt, RunnerSettings
from cirrus.db import Database
from tests.unit.fakes import FakeClock

FAST = RunnerSettings(concurrency=2, lease_s=30.0, idle_s=0.01, sweep_s=3600.0)


async def answer(claim: Claim, preempt: Preempt) -> Outcome:
    if claim.item.body["prompt"] == "boom":
        raise RuntimeError("a bug in this item")
    return Outcome(
        ItemState.SUCCEEDED, result={"echo": claim.item.body["prompt"]}, usage={"prompt_tokens": 1}
    )


async def submitted(store: BatchStore, prompts: list[str]) -> str:
    items = [NewItem({"prompt": prompt}) for prompt in prompts]
    return (await store.create("acct-a", None, "@cf/test/m", "workers-ai", items, 3600.0, {})).id


async def until(condition: Callable[[], Awaitable[bool]], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not await condition():  # noqa: ASYNC110 - the condition is a database read
            await asyncio.sleep(0.01)


async def finished(store: BatchStore, batch_id: str) -> bool:
    batch = await store.get("acct-a", batch_id)
    return batch is not None and batch.done == batch.total


async def running(runner: BatchRunner) -> "asyncio.Task[None]":
    task = asyncio.create_task(runner.run())
    await asyncio.sleep(0)
    return task


async def stopped(task: "asyncio.Task[None]") -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_every_item_runs_once_and_a_failing_item_fails_alone(database: Database) -> None:
    store = await BatchStore.open(database)
    batch_id = await submitted(store, ["a", "boom", "c"])
    task = await running(BatchRunner(store, answer, "gw-1", FAST))
    await until(lambda: finished(store, batch_id))
    await stopped(task)
    items = await store.items(batch_id)
    assert [item.state for item in items] == [ItemState.SUCCEEDED, ItemState.FAILED, ItemState.SUCCEEDED]
    assert items[0].result == {"echo": "a"} and items[0].attempts == 1
    assert items[1].error is not None and "a bug in this item" in items[1].error["message"]


async def test_a_preempted_item_goes_back_to_the_queue_and_runs_again(database: Database) -> None:
    store = await BatchStore.open(database)
    batch_id = await submitted(store, ["a"])
    seen: list[int] = []

    async def preempted_once(claim: Claim, preempt: Preempt) -> Outcome:
        seen.append(claim.item.attempts)
        if len(seen) == 1:
            preempt()  # as the pool does when an interactive request needs the slot
            await asyncio.sleep(10)
        return await answer(claim, preempt)

    task = await running(BatchRunner(store, preempted_once, "gw-1", FAST))
    await until(lambda: finished(store, batch_id))
    await stopped(task)
    [item] = await store.items(batch_id)
    assert (item.state, item.attempts, seen) == (ItemState.SUCCEEDED, 2, [1, 2])


async def test_a_runner_that_stops_gives_its_items_back(database: Database) -> None:
    store = await BatchStore.open(database)
    batch_id = await submitted(store, ["a", "b"])
    started = asyncio.Event()

    async def slow(claim: Claim, preempt: Preempt) -> Outcome:
        started.set()
        await asyncio.sleep(10)
        return await answer(claim, preempt)

    task = await running(BatchRunner(store, slow, "gw-1", FAST))
    await asyncio.wait_for(started.wait(), 5)
    await stopped(task)
    assert {item.state for item in await store.items(batch_id)} == {ItemState.QUEUED}
    task = await running(BatchRunner(store, answer, "gw-2", FAST))
    await until(lambda: finished(store, batch_id))
    await stopped(task)


async def test_a_lost_claim_stops_the_item_and_only_the_new_holder_finishes_it(database: Database) -> None:
    clock = FakeClock()
    store = await BatchStore.open(database, clock)
    batch_id = await submitted(store, ["a"])
    started = asyncio.Event()

    async def stalled(claim: Claim, preempt: Preempt) -> Outcome:
        started.set()
        await asyncio.sleep(10)
        return Outcome(ItemState.SUCCEEDED, result={"from": "the stalled runner"})

    settings = RunnerSettings(concurrency=1, lease_s=0.06, idle_s=0.01, sweep_s=3600.0)
    task = await running(BatchRunner(store, stalled, "gw-1", settings))
    await asyncio.wait_for(started.wait(), 5)
    clock.advance(60.0)  # gw-1 stalled past its lease: gw-2 takes the item over
    taken = await store.claim_next("gw-2", 30.0)
    assert taken is not None
    await asyncio.sleep(0.1)  # gw-1's next renewal finds its claim gone and stops the work
    assert await store.finish(taken, ItemState.SUCCEEDED, result={"from": "gw-2"})
    await stopped(task)
    [item] = await store.items(batch_id)
    assert (item.state, item.result) == (ItemState.SUCCEEDED, {"from": "gw-2"})
