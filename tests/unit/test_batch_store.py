"""The batch store on SQLite and PostgreSQL (as `database` gives them): batches per account, items claimed by
one runner at a time under a lease, finished once, and batches cancelled, expired and purged."""

import asyncio

import pytest

from cirrus.batches import Batch, BatchStore, Claim, ItemState, NewItem
from cirrus.db import Database, open_database
from tests.unit.fakes import FakeClock

DAY_S = 86_400.0
LEASE_S = 30.0


def new_items(count: int) -> list[NewItem]:
    return [NewItem({"prompt": f"item {n}"}, f"ref-{n}") for n in range(count)]


async def submit(
    store: BatchStore, count: int = 3, account: str = "acct-a", model: str = "@cf/meta/llama"
) -> Batch:
    return await store.create(
        account, "tok-1", model, "workers-ai", new_items(count), DAY_S, {"job": "nightly"}
    )


async def claim(store: BatchStore, holder: str = "gw-1") -> Claim:
    claimed = await store.claim_next(holder, LEASE_S)
    assert claimed is not None
    return claimed


async def test_a_batch_reads_back_with_its_items_in_order(database: Database) -> None:
    clock = FakeClock()
    store = await BatchStore.open(database, clock)
    await BatchStore.open(database, clock)  # the schema is idempotent
    batch = await submit(store)
    assert batch.id.startswith("batch_")
    assert batch.expires_at == clock.now + DAY_S
    assert (batch.total, batch.done, batch.status) == (3, 0, "queued")
    assert await store.get("acct-a", batch.id) == batch
    items = await store.items(batch.id)
    assert [(i.position, i.body, i.external_reference) for i in items] == [
        (n, {"prompt": f"item {n}"}, f"ref-{n}") for n in range(3)
    ]
    assert all(i.state is ItemState.QUEUED and i.attempts == 0 for i in items)
    assert [i.position for i in await store.items(batch.id, after_position=0, limit=1)] == [1]


async def test_another_account_sees_nothing_of_it(database: Database) -> None:
    store = await BatchStore.open(database, FakeClock())
    batch = await submit(store)
    assert await store.get("acct-b", batch.id) is None
    assert await store.list("acct-b", limit=10) == []
    assert await store.cancel("acct-b", batch.id) is None
    assert await store.queued_items("acct-b") == 0
    assert (await store.get("acct-a", batch.id)) == batch  # the other account's cancel changed nothing


async def test_the_list_is_newest_first_and_pages_by_batch_id(database: Database) -> None:
    clock = FakeClock()
    store = await BatchStore.open(database, clock)
    ids = []
    for _ in range(5):
        ids.append((await submit(store)).id)
        clock.advance(1.0)
    await submit(store, account="acct-b")
    newest_first = ids[::-1]
    first = await store.list("acct-a", limit=2)
    assert [b.id for b in first] == newest_first[:2]
    second = await store.list("acct-a", limit=2, after=first[-1].id)
    assert [b.id for b in second] == newest_first[2:4]
    assert [b.id for b in await store.list("acct-a", limit=10, after=second[-1].id)] == newest_first[4:]
    assert all(b.total == 3 for b in first + second)


async def test_an_empty_batch_is_refused(database: Database) -> None:
    store = await BatchStore.open(database, FakeClock())
    with pytest.raises(ValueError):
        await store.create("acct-a", None, "m", "openai", [], DAY_S, {})


async def test_items_are_claimed_oldest_batch_first_then_by_position(database: Database) -> None:
    clock = FakeClock()
    store = await BatchStore.open(database, clock)
    older = await submit(store, count=2)
    clock.advance(1.0)
    newer = await submit(store, count=1)
    claimed = [await claim(store) for _ in range(3)]
    assert [(c.item.batch_id, c.item.position) for c in claimed] == [
        (older.id, 0),
        (older.id, 1),
        (newer.id, 0),
    ]
    first = claimed[0]
    assert (first.holder, first.until, first.item.state, first.item.attempts) == (
        "gw-1",
        clock.now + LEASE_S,
        ItemState.RUNNING,
        1,
    )
    assert first.batch.id == older.id and first.batch.status == "running"
    assert await store.claim_next("gw-1", LEASE_S) is None


async def test_a_claim_takes_only_the_models_asked_for(database: Database) -> None:
    clock = FakeClock()
    store = await BatchStore.open(database, clock)
    await submit(store, count=1, model="model-a")
    clock.advance(1.0)
    wanted = await submit(store, count=1, model="model-b")
    assert await store.claim_next("gw-1", LEASE_S, models=[]) is None
    assert (await claim_of(store, models=["model-b", "model-c"])).item.batch_id == wanted.id
    assert await store.claim_next("gw-1", LEASE_S, models=["model-b"]) is None


async def claim_of(store: BatchStore, models: list[str]) -> Claim:
    claimed = await store.claim_next("gw-1", LEASE_S, models=models)
    assert claimed is not None
    return claimed


async def test_a_lapsed_lease_passes_the_item_on_and_it_finishes_once(database: Database) -> None:
    clock = FakeClock()
    store = await BatchStore.open(database, clock)
    batch = await submit(store, count=1)
    first = await claim(store, "gw-1")
    clock.advance(LEASE_S - 1)
    renewed = await store.renew(first, LEASE_S)
    assert renewed is not None and renewed.until == clock.now + LEASE_S
    assert await store.claim_next("gw-2", LEASE_S) is None  # the renewed lease still holds
    clock.advance(LEASE_S + 1)
    second = await claim(store, "gw-2")
    assert second.item.attempts == 2
    assert await store.renew(renewed, LEASE_S) is None
    assert not await store.finish(renewed, ItemState.SUCCEEDED, result={"response": "late"})
    assert await store.finish(
        second, ItemState.SUCCEEDED, result={"response": "ok"}, usage={"total_tokens": 7}
    )
    assert not await store.finish(second, ItemState.FAILED, error={"message": "twice"})
    [item] = await store.items(batch.id)
    assert (item.state, item.result, item.error, item.usage) == (
        ItemState.SUCCEEDED,
        {"response": "ok"},
        None,
        {"total_tokens": 7},
    )
    done = await store.get("acct-a", batch.id)
    assert done is not None and (done.status, done.done, done.counts[ItemState.SUCCEEDED]) == (
        "completed",
        1,
        1,
    )


async def test_the_same_holder_cannot_finish_a_newer_claim_with_a_stale_one(database: Database) -> None:
    clock = FakeClock()
    store = await BatchStore.open(database, clock)
    await submit(store, count=1)
    stale = await claim(store, "gw-1")
    clock.advance(LEASE_S + 1)
    fresh = await claim(store, "gw-1")
    assert not await store.finish(stale, ItemState.FAILED)
    assert not await store.release(stale)
    assert await store.finish(fresh, ItemState.SUCCEEDED)


async def test_an_item_finishes_only_in_a_terminal_state(database: Database) -> None:
    store = await BatchStore.open(database, FakeClock())
    await submit(store, count=1)
    with pytest.raises(ValueError):
        await store.finish(await claim(store), ItemState.QUEUED)


async def test_a_released_item_is_queued_again_with_its_attempt_counted(database: Database) -> None:
    store = await BatchStore.open(database, FakeClock())
    batch = await submit(store, count=1)
    first = await claim(store)
    assert await store.release(first)
    assert not await store.release(first)
    assert not await store.finish(first, ItemState.SUCCEEDED)
    [item] = await store.items(batch.id)
    assert (item.state, item.attempts) == (ItemState.QUEUED, 1)
    again = await claim(store, "gw-2")
    assert (again.item.position, again.item.attempts) == (0, 2)


async def test_a_cancel_leaves_running_items_to_finish(database: Database) -> None:
    store = await BatchStore.open(database, FakeClock())
    batch = await submit(store, count=3)
    running = await claim(store)
    cancelled = await store.cancel("acct-a", batch.id)
    assert cancelled is not None and cancelled.cancelled_at is not None
    assert cancelled.status == "cancelling"
    assert (cancelled.counts[ItemState.CANCELLED], cancelled.counts[ItemState.RUNNING]) == (2, 1)
    assert await store.claim_next("gw-2", LEASE_S) is None
    assert await store.finish(running, ItemState.SUCCEEDED, result={"response": "ok"})
    after = await store.get("acct-a", batch.id)
    assert after is not None and (after.status, after.done) == ("cancelled", 3)
    assert await store.queued_items("acct-a") == 0


async def test_an_item_released_after_the_cancel_is_cancelled(database: Database) -> None:
    store = await BatchStore.open(database, FakeClock())
    batch = await submit(store, count=1)
    running = await claim(store)
    await store.cancel("acct-a", batch.id)
    assert await store.release(running)
    after = await store.get("acct-a", batch.id)
    assert after is not None and after.status == "cancelled"


async def test_a_finished_batch_is_not_cancelled(database: Database) -> None:
    store = await BatchStore.open(database, FakeClock())
    batch = await submit(store, count=1)
    assert await store.finish(await claim(store), ItemState.SUCCEEDED)
    after = await store.cancel("acct-a", batch.id)
    assert after is not None and (after.status, after.cancelled_at) == ("completed", None)


async def test_the_sweep_settles_an_item_whose_runner_died_in_a_cancelled_batch(database: Database) -> None:
    clock = FakeClock()
    store = await BatchStore.open(database, clock)
    batch = await submit(store, count=1)
    await claim(store)
    await store.cancel("acct-a", batch.id)
    assert await store.expire() == 0  # the lease still holds
    clock.advance(LEASE_S + 1)
    assert await store.expire() == 1
    after = await store.get("acct-a", batch.id)
    assert after is not None and after.status == "cancelled"


async def test_a_batch_past_its_window_expires(database: Database) -> None:
    clock = FakeClock()
    store = await BatchStore.open(database, clock)
    batch = await submit(store, count=3)
    running = await claim(store)
    clock.advance(DAY_S - 1)
    assert await store.expire() == 0
    renewed = await store.renew(running, LEASE_S)
    assert renewed is not None
    clock.advance(1)
    assert await store.claim_next("gw-2", LEASE_S) is None  # expired even before the sweep
    assert await store.expire() == 2
    expiring = await store.get("acct-a", batch.id)
    assert expiring is not None and expiring.status == "running"
    assert await store.finish(renewed, ItemState.SUCCEEDED)
    expired = await store.get("acct-a", batch.id)
    assert expired is not None and (expired.status, expired.counts[ItemState.EXPIRED]) == ("expired", 2)


async def test_queued_items_counts_the_unfinished_ones_of_the_account(database: Database) -> None:
    clock = FakeClock()
    store = await BatchStore.open(database, clock)
    await submit(store, count=3)
    await submit(store, count=2)
    clock.advance(1.0)  # claimed after acct-a's
    await submit(store, count=4, account="acct-b")
    assert await store.queued_items("acct-a") == 5
    assert await store.finish(await claim(store), ItemState.FAILED, error={"message": "bad input"})
    await claim(store)  # running still counts
    assert await store.queued_items("acct-a") == 4


async def test_purge_takes_old_finished_batches_and_orphan_items(database: Database) -> None:
    clock = FakeClock()
    store = await BatchStore.open(database, clock)
    finished = await submit(store, count=1)
    assert await store.finish(await claim(store), ItemState.SUCCEEDED)
    unfinished = await submit(store, count=1)
    await database.execute(  # a create that crashed before writing its batch row
        "INSERT INTO batch_items (batch_id, position, created_at, body, state, attempts)"
        " VALUES ('batch_orphan', 0, ?, '{}', 'queued', 0)",
        (clock.now,),
    )
    assert await store.purge(older_than_s=DAY_S) == 0  # not old enough yet
    clock.advance(DAY_S + 1)
    assert await store.purge(older_than_s=DAY_S) == 1
    assert await store.get("acct-a", finished.id) is None
    assert await store.get("acct-a", unfinished.id) is not None
    rows = await database.fetch_all("SELECT DISTINCT batch_id FROM batch_items")
    assert rows == [(unfinished.id,)]


async def test_a_newer_orphan_is_kept_as_a_create_in_progress(database: Database) -> None:
    clock = FakeClock()
    store = await BatchStore.open(database, clock)
    await database.execute(
        "INSERT INTO batch_items (batch_id, position, created_at, body, state, attempts)"
        " VALUES ('batch_new', 0, ?, '{}', 'queued', 0)",
        (clock.now,),
    )
    assert await store.purge(older_than_s=60.0) == 0
    assert await database.fetch_all("SELECT batch_id FROM batch_items") == [("batch_new",)]


async def test_an_item_without_its_batch_row_is_never_claimed(database: Database) -> None:
    store = await BatchStore.open(database, FakeClock())
    await database.execute(
        "INSERT INTO batch_items (batch_id, position, created_at, body, state, attempts)"
        " VALUES ('batch_half', 0, 0, '{}', 'queued', 0)"
    )
    assert await store.claim_next("gw-1", LEASE_S) is None


async def test_two_gateways_claiming_at_once_never_get_the_same_item(
    database: Database, database_url: str
) -> None:
    """Two stores, each on its own connection(s) to the one database, as two gateways sharing it."""
    clock = FakeClock()
    other_db = await open_database(database_url)
    try:
        store, other = await BatchStore.open(database, clock), await BatchStore.open(other_db, clock)
        batches = [await submit(store, count=10) for _ in range(3)]
        attempts = [s.claim_next(f"gw-{n % 2}-{n}", LEASE_S) for n, s in enumerate([store, other] * 20)]
        claims = [c for c in await asyncio.gather(*attempts) if c is not None]
    finally:
        await other_db.close()
    taken = [(c.item.batch_id, c.item.position) for c in claims]
    assert len(taken) == 30
    assert sorted(taken) == sorted((b.id, n) for b in batches for n in range(10))
    assert all(c.item.attempts == 1 for c in claims)
