"""The ingest runner on an in-memory store and index: items are indexed once each, a file that cannot be read
fails with a message naming it, a transient embedding failure is retried, and a runner stopped mid-item leaves
nothing indexed and the item claimable again."""

import asyncio
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import pytest

from cirrus.errors import CapacityExceeded, InvalidInput, WorkerCrashed
from cirrus.rag.chunking import SPECIAL_TOKENS, estimate_tokens
from cirrus.rag.ingest import IngestRunner, IngestSettings
from cirrus.rag.model import ChunkText, Claim, Instance, Item, ItemState
from tests.rag_corpus import files
from tests.unit.fakes import FakeClock

FAST = IngestSettings(concurrency=2, lease_s=30.0, idle_s=0.01, embed_batch=2, retry_base_s=0.001)
MODEL = "@cf/sentence-transformers/all-minilm-l6-v2"


@dataclass
class Held:
    """An item as the store keeps it, with its claim."""

    item: Item
    content: bytes
    holder: str | None = None
    attempt: int = 0  # claims over the item's life
    tries: int = 0  # claims since its upload
    held_until: float = 0.0


class FakeRagStore:
    """RagStore's claiming rules: an item is claimable when queued or held under a lapsed lease; only the
    current claim (holder and attempt, still running) can renew, finish or release it."""

    def __init__(self, instance: Instance, clock: FakeClock) -> None:
        self.instance = instance
        self.clock = clock
        self.held: dict[str, Held] = {}
        self.refused = 0  # renewals of a claim no longer held

    def add(self, key: str, content: bytes) -> Item:
        now = self.clock()
        digest = hashlib.sha256(content).hexdigest()
        item = Item(
            f"item-{len(self.held)}", self.instance.uid, "acct-a", key, digest, len(content),
            ItemState.QUEUED, 0, None, "job-1", now, now,
        )  # fmt: skip
        self.held[item.id] = Held(item, content)
        return item

    def state(self, item_id: str) -> Item:
        return self.held[item_id].item

    async def instance_by_uid(self, uid: str) -> Instance | None:
        return self.instance if uid == self.instance.uid else None

    async def content(self, item: Item) -> bytes:
        return self.held[item.id].content

    async def claim_next(self, holder: str, lease_s: float) -> Claim | None:
        for held in self.held.values():
            state = held.item.state
            if state == ItemState.QUEUED or (state == ItemState.RUNNING and held.held_until < self.clock()):
                held.holder, held.attempt, held.tries = holder, held.attempt + 1, held.tries + 1
                held.held_until = self.clock() + lease_s
                held.item = replace(held.item, state=ItemState.RUNNING)
                return Claim(held.item, holder, held.attempt, held.tries)
        return None

    async def renew(self, claim: Claim, lease_s: float) -> bool:
        held = self._current(claim)
        if held is None:
            self.refused += 1
            return False
        held.held_until = self.clock() + lease_s
        return True

    async def complete(self, claim: Claim, chunks: int) -> bool:
        """As RagStore's, without removing the chunks of an item deleted meanwhile: the runner leaves that to
        the store."""
        return self._finish(claim, ItemState.COMPLETED, chunks=chunks)

    async def fail(self, claim: Claim, message: str) -> bool:
        return self._finish(claim, ItemState.ERROR, error=message)

    async def release(self, claim: Claim) -> bool:
        return self._finish(claim, ItemState.QUEUED)

    def _finish(self, claim: Claim, state: ItemState, chunks: int = 0, error: str | None = None) -> bool:
        held = self._current(claim)
        if held is not None:
            held.holder = None
            held.item = replace(held.item, state=state, chunks=chunks, error=error)
        return held is not None

    def _current(self, claim: Claim) -> Held | None:
        held = self.held.get(claim.item.id)
        if held is None or held.item.state != ItemState.RUNNING:
            return None
        return held if (held.holder, held.attempt) == (claim.holder, claim.attempt) else None


class FakeIndex:
    def __init__(self) -> None:
        self.items: dict[tuple[str, str], list[tuple[ChunkText, Sequence[float]]]] = {}
        self.log: list[tuple[str, str]] = []

    async def replace_item(
        self,
        instance_uid: str,
        item_id: str,
        key: str,
        chunks: Sequence[ChunkText],
        vectors: Sequence[Sequence[float]],
    ) -> None:
        assert len(chunks) == len(vectors)
        self.log.append(("replace", item_id))
        self.items[(instance_uid, item_id)] = list(zip(chunks, vectors, strict=True))

    async def delete_item(self, instance_uid: str, item_id: str) -> None:
        self.log.append(("delete", item_id))
        self.items.pop((instance_uid, item_id), None)

    def chunks(self, item_id: str) -> list[ChunkText]:
        return [chunk for chunk, _ in self.items.get(("uid-1", item_id), [])]


class Embedder:
    """Vectors of [number of texts in the call, position in it]; `failures` raise first, one per call."""

    def __init__(self, failures: Sequence[Exception] = ()) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.failures = list(failures)

    async def __call__(self, item: Item, model: str, texts: list[str]) -> list[list[float]]:
        assert item.key and all(texts)  # the work's item comes along, for whose work it is
        self.calls.append((model, texts))
        if self.failures:
            raise self.failures.pop(0)
        return [[float(len(texts)), float(n)] for n in range(len(texts))]


def instance(**settings: object) -> Instance:
    fields: dict[str, object] = {
        "uid": "uid-1", "id": "docs", "account_id": "acct-a", "embedding_model": MODEL,
        "chat_model": "@cf/huggingface/smollm2-135m-instruct", "chunk_size": 64, "chunk_overlap": 10,
        "hybrid": False, "max_num_results": 10, "score_threshold": 0.0, "created_at": 0.0, "modified_at": 0.0,
    }  # fmt: skip
    return Instance(**{**fields, **settings})  # type: ignore[arg-type]


def fake_store(**settings: object) -> FakeRagStore:
    return FakeRagStore(instance(**settings), FakeClock())


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():  # noqa: ASYNC110 - the condition reads the fakes
            await asyncio.sleep(0.005)


def settled(store: FakeRagStore) -> Callable[[], bool]:
    return lambda: all(h.item.state in (ItemState.COMPLETED, ItemState.ERROR) for h in store.held.values())


async def ran(runner: IngestRunner, condition: Callable[[], bool]) -> None:
    task = asyncio.create_task(runner.run())
    try:
        await until(condition)
    finally:
        await runner.stop()
    assert task.done()


async def test_every_document_is_indexed_once_with_its_chunks_embedded_in_batches() -> None:
    store, index, embed = fake_store(), FakeIndex(), Embedder()
    items = [store.add(key, data) for key, data in files()]
    await ran(IngestRunner(store, index, embed, "gw-1", FAST), settled(store))
    for item in items:
        indexed = store.state(item.id)
        assert (indexed.state, indexed.error) == (ItemState.COMPLETED, None), item.key
        assert indexed.chunks == len(index.chunks(item.id)) > 0
        assert [chunk.position for chunk in index.chunks(item.id)] == list(range(indexed.chunks))
    assert {model for model, _ in embed.calls} == {MODEL}
    assert all(1 <= len(texts) <= FAST.embed_batch for _, texts in embed.calls)
    assert sum(len(texts) for _, texts in embed.calls) == sum(store.state(i.id).chunks for i in items)
    [tidal] = [item for item in items if item.key == "energy/tidal.pdf"]
    assert any("La Rance" in chunk.text for chunk in index.chunks(tidal.id))


async def test_chunks_never_exceed_what_the_embedding_model_reads() -> None:
    store, index = fake_store(chunk_size=1024, chunk_overlap=0), FakeIndex()
    item = store.add("long.md", ("# Long\n\n" + "Every word here is counted. " * 400).encode())
    settings = replace(FAST, max_chunk_tokens=128)
    await ran(IngestRunner(store, index, Embedder(), "gw-1", settings), settled(store))
    chunks = index.chunks(item.id)
    assert len(chunks) > 1
    assert all(estimate_tokens(chunk.text) + SPECIAL_TOKENS <= 128 for chunk in chunks)


async def test_a_file_that_cannot_be_read_fails_with_a_message_naming_it() -> None:
    store, index = fake_store(), FakeIndex()
    unsupported = store.add("slides.pptx", b"PK\x03\x04")
    broken = store.add("broken.pdf", b"%PDF-1.4 truncated")
    headings = store.add("outline.md", b"# Only\n\n## Headings\n")
    good = store.add("good.md", b"# Fine\n\nIndexed.")
    await ran(IngestRunner(store, index, Embedder(), "gw-1", FAST), settled(store))
    for item, message in [
        (unsupported, "'slides.pptx' is not a supported document"),
        (broken, "'broken.pdf' is not a readable PDF"),
        (headings, "'outline.md' has no text to index"),
    ]:
        failed = store.state(item.id)
        assert failed.state == ItemState.ERROR and failed.error is not None
        assert failed.error.startswith(message) and "Traceback" not in failed.error
        assert index.chunks(item.id) == []
    assert store.state(good.id).state == ItemState.COMPLETED


async def test_an_embedding_the_model_refuses_fails_the_item() -> None:
    store, index = fake_store(), FakeIndex()
    item = store.add("a.md", b"# A\n\nText.")
    embed = Embedder([InvalidInput("'text[0]' is 300 tokens long")])
    await ran(IngestRunner(store, index, embed, "gw-1", FAST), settled(store))
    failed = store.state(item.id)
    assert failed.state == ItemState.ERROR
    assert failed.error == f"could not embed 'a.md' with {MODEL}: 'text[0]' is 300 tokens long"


async def test_a_transient_embedding_failure_is_retried_with_a_new_claim() -> None:
    store, index = fake_store(), FakeIndex()
    item = store.add("a.md", b"# A\n\nText.")
    embed = Embedder([CapacityExceeded("the queue is full"), WorkerCrashed("the worker exited")])
    await ran(IngestRunner(store, index, embed, "gw-1", FAST), settled(store))
    assert store.state(item.id).state == ItemState.COMPLETED
    assert store.held[item.id].attempt == 3
    assert len(index.chunks(item.id)) == 1 and len(embed.calls) == 3


async def test_a_transient_failure_past_the_attempts_allowed_fails_the_item() -> None:
    store, index = fake_store(), FakeIndex()
    item = store.add("a.md", b"# A\n\nText.")
    embed = Embedder([CapacityExceeded("the queue is full")] * 3)
    await ran(IngestRunner(store, index, embed, "gw-1", replace(FAST, max_tries=3)), settled(store))
    failed = store.state(item.id)
    assert failed.state == ItemState.ERROR
    assert failed.error == "could not index 'a.md' in 3 tries: the queue is full"


async def test_a_runner_stopped_mid_item_leaves_nothing_indexed_and_the_item_is_claimed_again() -> None:
    store, index = fake_store(), FakeIndex()
    item = store.add("a.md", b"# A\n\n" + b"Several words to embed here. " * 30)
    embedding = asyncio.Event()
    first_batch_done: list[bool] = []

    async def slow_after_first_batch(_item: Item, model: str, texts: list[str]) -> list[list[float]]:
        if first_batch_done:
            embedding.set()
            await asyncio.sleep(10)
        first_batch_done.append(True)
        return [[1.0, 0.0] for _ in texts]

    task = asyncio.create_task(IngestRunner(store, index, slow_after_first_batch, "gw-1", FAST).run())
    await asyncio.wait_for(embedding.wait(), 5)
    task.cancel()  # as a server shutting down cancels its background tasks
    with pytest.raises(asyncio.CancelledError):
        await task
    assert store.state(item.id).state == ItemState.QUEUED and index.items == {}
    await ran(IngestRunner(store, index, Embedder(), "gw-2", FAST), settled(store))
    assert store.state(item.id).state == ItemState.COMPLETED and store.held[item.id].attempt == 2


async def test_stop_gives_back_the_items_in_flight() -> None:
    store, index = fake_store(), FakeIndex()
    items = [store.add(f"{n}.md", b"# N\n\nText.") for n in range(2)]
    started = asyncio.Event()

    async def hanging(_item: Item, model: str, texts: list[str]) -> list[list[float]]:
        started.set()
        await asyncio.sleep(10)
        return []

    runner = IngestRunner(store, index, hanging, "gw-1", FAST)
    task = asyncio.create_task(runner.run())
    await asyncio.wait_for(started.wait(), 5)
    await runner.stop()
    assert task.done()
    assert [store.state(item.id).state for item in items] == [ItemState.QUEUED, ItemState.QUEUED]


async def test_a_lost_claim_drops_the_work_and_only_the_new_holder_finishes() -> None:
    store, index = fake_store(), FakeIndex()
    item = store.add("a.md", b"# A\n\nText.")
    started, dropped = asyncio.Event(), asyncio.Event()

    async def stalled(_item: Item, model: str, texts: list[str]) -> list[list[float]]:
        started.set()
        try:
            await asyncio.sleep(10)
        finally:
            dropped.set()
        return [[9.0] for _ in texts]

    settings = replace(FAST, concurrency=1, lease_s=0.06)
    runner = IngestRunner(store, index, stalled, "gw-1", settings)
    task = asyncio.create_task(runner.run())
    await asyncio.wait_for(started.wait(), 5)
    store.clock.advance(60.0)  # gw-1 stalled past its lease: gw-2 takes the item over
    taken = await store.claim_next("gw-2", 30.0)
    assert taken is not None
    await asyncio.wait_for(dropped.wait(), 5)  # gw-1's next renewal finds the claim gone and stops
    assert await store.complete(taken, 0)
    await runner.stop()
    assert task.done() and index.items == {}
    assert store.state(item.id).state == ItemState.COMPLETED


async def test_a_file_replaced_by_an_unreadable_one_keeps_its_old_chunks_searchable() -> None:
    store, index = fake_store(), FakeIndex()
    item = store.add("a.md", b"# A\n\nText.")
    await ran(IngestRunner(store, index, Embedder(), "gw-1", FAST), settled(store))
    assert index.chunks(item.id)
    indexed = index.chunks(item.id)
    held = store.held[item.id]  # the file is uploaded again, now as bytes that are not UTF-8
    held.content, held.item, held.tries = b"\xff\xfe", replace(held.item, state=ItemState.QUEUED), 0
    await ran(IngestRunner(store, index, Embedder(), "gw-1", FAST), settled(store))
    assert store.state(item.id).state == ItemState.ERROR
    assert index.chunks(item.id) == indexed  # as RagStore.fail keeps the count of what was indexed


async def test_an_item_deleted_while_it_was_embedded_is_not_written() -> None:
    store, index = fake_store(), FakeIndex()
    store.add("a.md", b"# A\n\nText.")

    async def deleting(embedded: Item, model: str, texts: list[str]) -> list[list[float]]:
        del store.held[embedded.id]  # deleted by its owner meanwhile
        return [[1.0] for _ in texts]

    await ran(IngestRunner(store, index, deleting, "gw-1", FAST), lambda: store.refused > 0)
    assert index.log == []
