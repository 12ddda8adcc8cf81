"""The AI Search store on SQLite and PostgreSQL (as `database` gives them): instances per account, uploaded items
and their jobs, unchanged files left alone, and items claimed by one ingest runner at a time under a lease."""

import asyncio
import hashlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from cirrus.db import Database, open_database
from cirrus.errors import InvalidInput, NotFound
from cirrus.rag import ChunkText, Claim, Instance, ItemState, RagStore
from tests.unit.fakes import FakeClock
from tests.unit.test_rag_index import require_index

LEASE_S = 60.0
ACCOUNT = "acct-a"


@pytest_asyncio.fixture(loop_scope="function")
async def clock() -> FakeClock:
    return FakeClock()


@pytest_asyncio.fixture(loop_scope="function")
async def store(database: Database, clock: FakeClock) -> AsyncIterator[RagStore]:
    yield await open_store(database, clock)


async def open_store(db: Database, clock: FakeClock, **limits: Any) -> RagStore:
    return await RagStore.open(db, clock, index=await require_index(db), **limits)


async def claim(store: RagStore, holder: str = "gw-1") -> Claim:
    claimed = await store.claim_next(holder, LEASE_S)
    assert claimed is not None
    return claimed


async def indexed(store: RagStore, claimed: Claim, texts: list[str]) -> None:
    """What a runner does with a claim: write the chunks, then complete."""
    chunks = [ChunkText(n, text, "") for n, text in enumerate(texts)]
    await store.index.replace_item(
        claimed.item.instance_uid, claimed.item.id, claimed.item.key, chunks, [[1.0, 0.0]] * len(chunks)
    )
    assert await store.complete(claimed, len(chunks))


async def docs(store: RagStore, account: str = ACCOUNT, id: str = "docs") -> Instance:
    return await store.create_instance(account, id)


async def test_an_instance_reads_back_with_its_settings(
    store: RagStore, database: Database, clock: FakeClock
) -> None:
    await RagStore.open(database, clock, index=store.index)  # the schema is idempotent
    made = await docs(store)
    assert (made.id, made.account_id, made.chunk_size, made.chunk_overlap) == ("docs", ACCOUNT, 256, 10)
    assert made.embedding_model == "@cf/sentence-transformers/all-minilm-l6-v2"
    assert (made.hybrid, made.max_num_results, made.score_threshold) == (False, 10, 0.0)
    assert made.created_at == made.modified_at == clock.now
    clock.advance(1.0)
    tuned = await store.create_instance(
        ACCOUNT, "notes_2", chat_model="@cf/meta/llama", chunk_size=512, hybrid=True, score_threshold=0.25
    )
    assert (tuned.chat_model, tuned.chunk_size, tuned.hybrid, tuned.score_threshold) == (
        "@cf/meta/llama",
        512,
        True,
        0.25,
    )
    assert await store.instance(ACCOUNT, "docs") == made
    assert await store.instance_by_uid(tuned.uid) == tuned
    assert await store.instances(ACCOUNT) == [made, tuned]
    assert made.uid != tuned.uid and len(made.uid) == 32


@pytest.mark.parametrize("bad_id", ["", "Docs", "a" * 33, "my docs", "x/y", "ü"])
async def test_a_bad_id_is_refused(store: RagStore, bad_id: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        await store.create_instance(ACCOUNT, bad_id)
    assert refused.value.param == "id"


@pytest.mark.parametrize(
    "settings",
    [
        {"chunk_size": 63},
        {"chunk_size": 2048},
        {"chunk_overlap": 31},
        {"max_num_results": 0},
        {"score_threshold": 1.5},
        {"score_threshold": float("nan")},
        {"hybrid": "yes"},
        {"chunk_size": True},
        {"embedding_model": ""},
        {"colour": "blue"},
    ],
)
async def test_a_bad_setting_is_refused(store: RagStore, settings: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput) as refused:
        await store.create_instance(ACCOUNT, "docs", **settings)
    assert refused.value.param == next(iter(settings))
    assert await store.instances(ACCOUNT) == []


async def test_a_taken_id_and_the_account_limit_are_refused(database: Database, clock: FakeClock) -> None:
    store = await open_store(database, clock, max_instances=2)
    await docs(store, id="one")
    with pytest.raises(InvalidInput, match="already has"):
        await docs(store, id="one")
    await docs(store, id="two")
    with pytest.raises(InvalidInput, match="at most 2"):
        await docs(store, id="three")
    assert await docs(store, account="acct-b", id="one")  # the limit and the ids are per account
    assert [i.id for i in await store.instances(ACCOUNT)] == ["one", "two"]


async def test_another_account_sees_nothing_of_an_instance(store: RagStore) -> None:
    mine = await docs(store)
    assert await store.instance("acct-b", "docs") is None
    assert await store.instances("acct-b") == []
    assert await store.update_instance("acct-b", "docs", chunk_size=128) is None
    assert not await store.delete_instance("acct-b", "docs")
    theirs = await docs(store, account="acct-b")  # the same name in another account is another instance
    assert theirs.uid != mine.uid
    assert await store.instance(ACCOUNT, "docs") == mine


async def test_an_update_changes_settings_but_not_the_model_of_indexed_vectors(
    store: RagStore, clock: FakeClock
) -> None:
    made = await docs(store)
    clock.advance(5.0)
    updated = await store.update_instance(
        ACCOUNT, "docs", chunk_size=128, hybrid=True, embedding_model="@cf/b"
    )
    assert updated is not None
    assert (updated.chunk_size, updated.hybrid, updated.embedding_model) == (128, True, "@cf/b")
    assert (updated.created_at, updated.modified_at) == (made.created_at, clock.now)
    assert await store.update_instance(ACCOUNT, "docs") == updated
    with pytest.raises(InvalidInput):
        await store.update_instance(ACCOUNT, "docs", chunk_overlap=99)
    await store.add_items(updated, [("a.md", b"# A")])
    with pytest.raises(InvalidInput) as refused:
        await store.update_instance(ACCOUNT, "docs", embedding_model="@cf/c")
    assert refused.value.param == "embedding_model"
    assert await store.update_instance(ACCOUNT, "docs", embedding_model="@cf/b", max_num_results=5)


async def test_an_upload_queues_its_files_in_one_job(store: RagStore, clock: FakeClock) -> None:
    instance = await docs(store)
    pdf = bytes(range(256))  # not text: kept byte for byte
    files = [("guide/intro.md", b"# Intro\n"), ("paper.pdf", pdf)]
    job_id, items = await store.add_items(instance, files, token_id="tok-1")
    assert [(i.key, i.size, i.state, i.chunks, i.job_id, i.token_id) for i in items] == [
        ("guide/intro.md", 8, ItemState.QUEUED, 0, job_id, "tok-1"),
        ("paper.pdf", 256, ItemState.QUEUED, 0, job_id, "tok-1"),
    ]
    assert items[1].content_hash == hashlib.sha256(pdf).hexdigest()
    assert (items[1].instance_uid, items[1].account_id, items[1].error) == (instance.uid, ACCOUNT, None)
    assert await store.content(items[1]) == pdf
    assert await store.item(instance, items[0].id) == items[0]
    assert await store.items(instance) == items
    job = await store.job(instance, job_id)
    assert job is not None
    assert (job.total, job.queued, job.finished, job.ended_at, job.created_at) == (
        2,
        2,
        False,
        None,
        clock.now,
    )


@pytest.mark.parametrize(
    "files", [[], [("", b"x")], [("  ", b"x")], [("a.md", b"1"), ("a.md", b"2")]], ids=str
)
async def test_an_upload_without_names_or_naming_one_twice_is_refused(
    store: RagStore, files: list[tuple[str, bytes]]
) -> None:
    instance = await docs(store)
    with pytest.raises(InvalidInput):
        await store.add_items(instance, files)
    assert await store.items(instance) == []


async def test_an_unchanged_file_is_left_alone_and_a_changed_one_queued_again(
    store: RagStore, clock: FakeClock
) -> None:
    instance = await docs(store)
    first_job, (first,) = await store.add_items(instance, [("a.md", b"version one")], token_id="tok-1")
    await indexed(store, await claim(store), ["one"])
    clock.advance(10.0)
    again_job, (again,) = await store.add_items(instance, [("a.md", b"version one")], token_id="tok-2")
    assert again_job != first_job
    assert again.token_id == "tok-1"
    assert (again.id, again.state, again.job_id, again.chunks) == (
        first.id,
        ItemState.COMPLETED,
        first_job,
        1,
    )
    assert await store.claim_next("gw-1", LEASE_S) is None  # nothing to index
    job = await store.job(instance, again_job)
    assert job is not None and (job.total, job.finished, job.ended_at) == (0, True, job.created_at)

    changed_job, (changed,) = await store.add_items(instance, [("a.md", b"version two")], token_id="tok-2")
    assert (changed.id, changed.state, changed.job_id) == (first.id, ItemState.QUEUED, changed_job)
    assert changed.token_id == "tok-2"  # its embedding is now made as the second uploader
    assert changed.chunks == 1  # the old chunks stay searchable until the new ones replace them
    assert changed.content_hash == hashlib.sha256(b"version two").hexdigest()
    assert await store.content(changed) == b"version two"
    assert (await claim(store)).item.id == first.id


async def test_a_file_that_failed_is_queued_again_by_the_same_upload(store: RagStore) -> None:
    instance = await docs(store)
    await store.add_items(instance, [("scan.pdf", b"%PDF")])
    assert await store.fail(await claim(store), "no text")
    _, (again,) = await store.add_items(instance, [("scan.pdf", b"%PDF")])
    assert (again.state, again.error) == (ItemState.QUEUED, None)


async def test_an_instance_holds_at_most_its_item_limit(database: Database, clock: FakeClock) -> None:
    store = await open_store(database, clock, max_items=3)
    instance = await docs(store)
    await store.add_items(instance, [("a.md", b"a"), ("b.md", b"b")])
    with pytest.raises(InvalidInput, match="at most 3"):
        await store.add_items(instance, [("a.md", b"a2"), ("c.md", b"c"), ("d.md", b"d")])
    assert [i.key for i in await store.items(instance)] == ["a.md", "b.md"]  # refused whole
    _, items = await store.add_items(instance, [("a.md", b"a3"), ("c.md", b"c")])  # a.md is no new file
    assert [i.key for i in items] == ["a.md", "c.md"]


async def test_items_page_by_key_and_filter_by_state(store: RagStore) -> None:
    instance = await docs(store)
    await store.add_items(instance, [(f"{name}.md", name.encode()) for name in "dbca"])
    assert [i.key for i in await store.items(instance, limit=2)] == ["a.md", "b.md"]
    assert [i.key for i in await store.items(instance, after_key="b.md")] == ["c.md", "d.md"]
    assert await store.fail(await claim(store), "bad")
    assert [i.state for i in await store.items(instance, state=ItemState.ERROR)] == [ItemState.ERROR]


async def test_a_job_counts_its_items_by_state_until_all_settle(store: RagStore, clock: FakeClock) -> None:
    instance = await docs(store)
    job_id, _ = await store.add_items(instance, [("a.md", b"a"), ("b.md", b"b"), ("c.md", b"c")])
    clock.advance(1.0)
    await indexed(store, await claim(store), ["a"])
    running = await claim(store)
    job = await store.job(instance, job_id)
    assert job is not None
    assert (job.queued, job.running, job.completed, job.errored, job.finished) == (1, 1, 1, 0, False)
    clock.advance(1.0)
    assert await store.fail(running, "unreadable")
    clock.advance(1.0)
    await indexed(store, await claim(store), ["c"])
    job = await store.job(instance, job_id)
    assert job is not None
    assert (job.total, job.completed, job.errored, job.finished, job.ended_at) == (3, 2, 1, True, clock.now)
    other = await docs(store, id="other")
    assert await store.job(other, job_id) is None  # a job is found through its own instance only
    assert await store.job(instance, "no-such-job") is None


async def test_deleting_an_item_removes_its_chunks(store: RagStore) -> None:
    instance = await docs(store)
    _, (kept, gone) = await store.add_items(instance, [("kept.md", b"k"), ("gone.md", b"g")])
    await indexed(store, await claim(store), ["kept chunk"])
    await indexed(store, await claim(store), ["gone chunk"])
    assert await store.delete_item(instance, gone.id)
    assert not await store.delete_item(instance, gone.id)
    assert await store.item(instance, gone.id) is None
    with pytest.raises(NotFound):
        await store.content(gone)
    hits = await store.index.nearest(instance.uid, [1.0, 0.0], k=5)
    assert [h.item_id for h in hits] == [kept.id]
    other = await docs(store, id="other")
    assert not await store.delete_item(other, kept.id)  # only through its own instance


async def test_deleting_an_instance_removes_its_items_jobs_and_chunks(store: RagStore) -> None:
    instance = await docs(store)
    job_id, _ = await store.add_items(instance, [("a.md", b"a"), ("b.md", b"b")])
    await indexed(store, await claim(store), ["a chunk"])
    assert await store.delete_instance(ACCOUNT, "docs")
    assert not await store.delete_instance(ACCOUNT, "docs")
    assert await store.instance(ACCOUNT, "docs") is None
    assert await store.items(instance) == []
    assert await store.job(instance, job_id) is None
    assert await store.index.nearest(instance.uid, [1.0, 0.0], k=5) == []
    assert await store.claim_next("gw-1", LEASE_S) is None  # its queued item went with it
    reborn = await docs(store)
    assert reborn.uid != instance.uid and await store.items(reborn) == []


async def test_items_are_claimed_oldest_first_each_by_one_runner(store: RagStore, clock: FakeClock) -> None:
    instance = await docs(store)
    await store.add_items(instance, [("a.md", b"a"), ("b.md", b"b")])
    clock.advance(1.0)
    await store.add_items(instance, [("c.md", b"c")])
    claims = [await claim(store, holder) for holder in ("gw-1", "gw-2", "gw-1")]
    assert sorted(c.item.key for c in claims[:2]) == ["a.md", "b.md"]
    assert claims[2].item.key == "c.md"
    first = claims[0]
    assert (first.holder, first.attempt, first.tries, first.item.state) == ("gw-1", 1, 1, ItemState.RUNNING)
    assert await store.claim_next("gw-3", LEASE_S) is None


async def test_a_lapsed_lease_lets_another_runner_take_the_item(store: RagStore, clock: FakeClock) -> None:
    instance = await docs(store)
    await store.add_items(instance, [("a.md", b"a")])
    stale = await claim(store, "gw-1")
    clock.advance(LEASE_S / 2)
    assert await store.renew(stale, LEASE_S)
    clock.advance(LEASE_S - 1)
    assert await store.claim_next("gw-2", LEASE_S) is None  # renewed: still held
    clock.advance(2.0)
    current = await claim(store, "gw-2")
    assert (current.item.id, current.attempt, current.tries) == (stale.item.id, 2, 2)
    # the stale claim can neither renew, complete, fail nor release the item now
    assert not await store.renew(stale, LEASE_S)
    assert not await store.complete(stale, 3)
    assert not await store.fail(stale, "late")
    assert not await store.release(stale)
    assert await store.complete(current, 4)
    (item,) = await store.items(instance)
    assert (item.state, item.chunks, item.error) == (ItemState.COMPLETED, 4, None)
    assert not await store.complete(current, 5)  # completed once


async def test_the_same_runner_retaking_an_item_holds_a_new_claim(store: RagStore, clock: FakeClock) -> None:
    instance = await docs(store)
    await store.add_items(instance, [("a.md", b"a")])
    stale = await claim(store, "gw-1")
    clock.advance(LEASE_S + 1)
    current = await claim(store, "gw-1")
    assert current.attempt == stale.attempt + 1
    assert not await store.complete(stale, 1)
    assert await store.complete(current, 1)


async def test_a_released_item_goes_to_the_back_of_the_queue(store: RagStore, clock: FakeClock) -> None:
    instance = await docs(store)
    await store.add_items(instance, [("a.md", b"a")])
    clock.advance(1.0)
    await store.add_items(instance, [("b.md", b"b")])
    first = await claim(store)
    assert first.item.key == "a.md"
    clock.advance(1.0)
    assert await store.release(first)
    assert not await store.release(first)
    again = [await claim(store), await claim(store)]
    assert [c.item.key for c in again] == ["b.md", "a.md"]
    assert (again[1].attempt, again[1].tries) == (2, 2)


async def test_a_failed_item_keeps_its_message(store: RagStore) -> None:
    instance = await docs(store)
    await store.add_items(instance, [("a.pdf", b"%PDF")])
    assert await store.fail(await claim(store), "'a.pdf' is a PDF without text" + "!" * 5000)
    (item,) = await store.items(instance)
    assert item.state is ItemState.ERROR
    assert (
        item.error is not None
        and item.error.startswith("'a.pdf' is a PDF without text")
        and len(item.error) <= 2000
    )
    assert await store.claim_next("gw-1", LEASE_S) is None


async def test_an_item_whose_runners_keep_dying_is_given_up(database: Database, clock: FakeClock) -> None:
    store = await open_store(database, clock, max_tries=2)
    instance = await docs(store)
    await store.add_items(instance, [("huge.pdf", b"%PDF")])
    for _ in range(2):
        await claim(store)
        clock.advance(LEASE_S + 1)
    assert await store.claim_next("gw-1", LEASE_S) is None
    (item,) = await store.items(instance)
    assert item.state is ItemState.ERROR and item.error is not None and "2 times" in item.error
    _, (again,) = await store.add_items(instance, [("huge.pdf", b"%PDF")])  # uploading it again retries
    assert again.state is ItemState.QUEUED
    assert (await claim(store)).tries == 1


async def test_a_file_uploaded_again_while_indexed_is_indexed_again(store: RagStore) -> None:
    instance = await docs(store)
    await store.add_items(instance, [("a.md", b"one")])
    old = await claim(store)
    await store.add_items(instance, [("a.md", b"two")])
    assert not await store.renew(old, LEASE_S)  # the runner learns its work is stale
    assert not await store.complete(old, 1)
    new = await claim(store)
    assert (new.item.id, new.item.content_hash) == (old.item.id, hashlib.sha256(b"two").hexdigest())
    assert new.tries == 1 and new.attempt == old.attempt + 1


async def test_chunks_written_for_an_item_deleted_meanwhile_are_removed(store: RagStore) -> None:
    instance = await docs(store)
    await store.add_items(instance, [("a.md", b"a")])
    claimed = await claim(store)
    assert await store.delete_item(instance, claimed.item.id)
    chunks = [ChunkText(0, "late chunk", "")]
    await store.index.replace_item(instance.uid, claimed.item.id, "a.md", chunks, [[1.0, 0.0]])
    assert not await store.complete(claimed, 1)
    assert await store.index.nearest(instance.uid, [1.0, 0.0], k=5) == []


async def test_two_stores_claiming_at_once_never_take_the_same_item(
    database: Database, database_url: str, clock: FakeClock
) -> None:
    """Two gateways on one database, each with several claimers."""
    first = await open_store(database, clock)
    other_db = await open_database(database_url)
    try:
        second = await RagStore.open(other_db, clock)
        instance = await docs(first)
        count = 24
        await first.add_items(instance, [(f"{n:02}.md", b"%d" % n) for n in range(count)])

        async def claim_all(store: RagStore, holder: str) -> list[str]:
            taken = []
            while (claimed := await store.claim_next(holder, LEASE_S)) is not None:
                taken.append(claimed.item.id)
            return taken

        runs = await asyncio.gather(
            *(
                claim_all(store, f"{name}-{n}")
                for store, name in ((first, "a"), (second, "b"))
                for n in range(3)
            )
        )
        taken = [item_id for run in runs for item_id in run]
        assert len(taken) == count and len(set(taken)) == count
    finally:
        await other_db.close()
