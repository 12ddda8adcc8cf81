"""The chunk index on both back-ends (SQLite's exact search and FTS5; PostgreSQL's pgvector and full text), as the
`database` fixture gives them: nearest and keyword search, key prefixes, replacing an item atomically for readers,
deletes, and reciprocal rank fusion."""

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np
import pytest
import pytest_asyncio

from cirrus.db import Database, open_database
from cirrus.db.database import Params, Row
from cirrus.errors import InvalidInput
from cirrus.rag import ChunkIndex, ChunkText, Hit, fuse, live_items, live_vectors, open_index
from cirrus.rag.live_vectors import InstanceVectors, ItemVectors, unit_rows
from cirrus.rag.pgvector_index import vector_available

DIMENSION = 8


async def require_index(db: Database) -> ChunkIndex:
    """The database's index; a PostgreSQL without pgvector skips the test (fails it under CI)."""
    if db.dialect == "postgresql" and not await vector_available(db):
        message = "this PostgreSQL lacks pgvector: run scripts/bootstrap.sh --test-services"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return await open_index(db)


@pytest_asyncio.fixture(loop_scope="function")
async def index(database: Database) -> AsyncIterator[ChunkIndex]:
    yield await require_index(database)


def new_uid() -> str:
    return uuid.uuid4().hex


def axis(n: int, dimension: int = DIMENSION) -> list[float]:
    vector = [0.0] * dimension
    vector[n] = 1.0
    return vector


def chunks_of(texts: Sequence[str], heading: str = "") -> list[ChunkText]:
    return [ChunkText(n, text, heading) for n, text in enumerate(texts)]


async def put(
    index: ChunkIndex,
    uid: str,
    item_id: str,
    key: str,
    texts: Sequence[str],
    vectors: Sequence[Sequence[float]],
) -> None:
    await index.replace_item(uid, item_id, key, chunks_of(texts, heading=key), vectors)


async def test_nearest_ranks_by_cosine_and_says_where_each_chunk_is(index: ChunkIndex) -> None:
    uid = new_uid()
    await put(index, uid, "i-guide", "docs/guide.md", ["install", "configure"], [axis(0), axis(1)])
    await put(index, uid, "i-faq", "faq.md", ["between"], [[1.0, 1.0] + [0.0] * (DIMENSION - 2)])
    hits = await index.nearest(uid, [2.0, 0.1] + [0.0] * (DIMENSION - 2), k=3)
    assert [(h.item_id, h.position, h.key, h.text, h.heading) for h in hits] == [
        ("i-guide", 0, "docs/guide.md", "install", "docs/guide.md"),
        ("i-faq", 0, "faq.md", "between", "faq.md"),
        ("i-guide", 1, "docs/guide.md", "configure", "docs/guide.md"),
    ]
    query = np.array([2.0, 0.1])
    expected = [query[0] / np.linalg.norm(query), query.sum() / np.linalg.norm(query) / np.sqrt(2)]
    assert [h.score for h in hits[:2]] == pytest.approx(expected, abs=1e-5)
    assert [h.item_id for h in await index.nearest(uid, axis(1), k=1)] == ["i-guide"]
    assert await index.nearest(uid, axis(1), k=0) == []
    assert await index.nearest(new_uid(), axis(1), k=5) == []  # nothing indexed there


async def test_more_neighbours_than_an_hnsw_scan_returns_by_default(index: ChunkIndex) -> None:
    uid = new_uid()
    vectors = np.random.default_rng(7).normal(size=(120, DIMENSION)).tolist()
    await put(index, uid, "i-many", "many.md", [f"chunk {n}" for n in range(120)], vectors)
    hits = await index.nearest(uid, vectors[0], k=60)
    assert len(hits) == 60
    assert hits[0].position == 0 and hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


async def test_keyword_search_matches_words_best_first(index: ChunkIndex) -> None:
    uid = new_uid()
    texts = [
        "Installing the gateway takes one command.",
        "The gateway routes requests to models; the gateway keeps a pool of gateway workers.",
        "Bananas are yellow.",
    ]
    await put(index, uid, "i-1", "guide.md", texts, [axis(n) for n in range(3)])
    hits = await index.keyword(uid, "gateway", k=5)
    assert [h.position for h in hits] == [1, 0]
    assert hits[0].score > hits[1].score > 0
    assert [h.position for h in await index.keyword(uid, "install", k=5)] == [0]  # stemmed
    assert [h.position for h in await index.keyword(uid, "yellow OR bananas", k=5)] == [2]
    assert [h.position for h in await index.keyword(uid, "the bananas", k=5)] == [
        2
    ]  # "the" is in every chunk
    assert await index.keyword(uid, "kiwi", k=5) == []
    assert await index.keyword(uid, "", k=5) == []
    assert await index.keyword(new_uid(), "gateway", k=5) == []


@pytest.mark.parametrize(
    "query", ['"unbalanced', "NEAR(a b", "text:gateway", "a AND NOT", "-gateway*", "'; --"]
)
async def test_no_query_text_is_read_as_search_syntax(index: ChunkIndex, query: str) -> None:
    uid = new_uid()
    await put(index, uid, "i-1", "guide.md", ["the gateway and its text"], [axis(0)])
    hits = await index.keyword(uid, query, k=5)
    assert all(hit.item_id == "i-1" for hit in hits)


async def test_a_search_of_some_items_returns_only_theirs(index: ChunkIndex) -> None:
    uid = new_uid()
    await put(index, uid, "i-a", "team-a/notes.md", ["shared words here"], [axis(0)])
    await put(index, uid, "i-b", "team-b/notes.md", ["shared words there"], [axis(0)])
    await put(index, uid, "i-c", "team-c/notes.md", ["shared words too"], [axis(0)])
    near = await index.nearest(uid, axis(0), k=5, items=frozenset({"i-b", "i-c"}))
    words = await index.keyword(uid, "shared words", k=5, items=frozenset({"i-b", "i-c"}))
    assert sorted(h.item_id for h in near) == sorted(h.item_id for h in words) == ["i-b", "i-c"]
    assert await index.nearest(uid, axis(0), k=5, items=frozenset()) == []
    assert await index.keyword(uid, "shared", k=5, items=frozenset({"i-gone"})) == []


async def test_indexed_items_are_the_searchable_ones_with_when_their_chunks_were_written(
    index: ChunkIndex,
) -> None:
    uid = new_uid()
    before = time.time()
    await put(index, uid, "i-a", "team-a/notes.md", ["alpha"], [axis(0)])
    await put(index, uid, "i-b", "b.md", ["beta"], [axis(1)])
    after = time.time()
    await index.delete_item(uid, "i-b")
    [(item_id, key, indexed_at)] = await index.indexed_items(uid)
    assert (item_id, key) == ("i-a", "team-a/notes.md") and before <= indexed_at <= after
    assert await index.indexed_items(new_uid()) == []


async def test_a_few_items_are_found_below_many_better_matches_elsewhere(index: ChunkIndex) -> None:
    uid = new_uid()
    await put(index, uid, "i-a", "a/many.md", ["needle needle needle"] * 120, [axis(0)] * 120)
    await put(index, uid, "i-b", "b/one.md", ["a needle in a long haystack of other words"], [axis(1)])
    words = await index.keyword(uid, "needle", k=3, items=frozenset({"i-b"}))
    near = await index.nearest(uid, axis(0), k=3, items=frozenset({"i-b"}))
    assert [h.item_id for h in words] == [h.item_id for h in near] == ["i-b"]


async def test_instances_never_see_each_others_chunks(index: ChunkIndex) -> None:
    mine, theirs = new_uid(), new_uid()
    await put(index, mine, "i-1", "a.md", ["apples grow on trees"], [axis(0)])
    await put(index, theirs, "i-2", "b.md", ["apples are red"], [axis(0)])
    assert [h.item_id for h in await index.nearest(mine, axis(0), k=5)] == ["i-1"]
    assert [h.item_id for h in await index.keyword(theirs, "apples", k=5)] == ["i-2"]


async def test_replacing_an_item_swaps_its_chunks_and_leaves_others(index: ChunkIndex) -> None:
    uid = new_uid()
    await put(index, uid, "i-1", "a.md", ["old alpha", "old beta", "old gamma"], [axis(0)] * 3)
    await put(index, uid, "i-2", "b.md", ["other alpha"], [axis(0)])
    await put(index, uid, "i-1", "a.md", ["new alpha"], [axis(0)])
    near = await index.nearest(uid, axis(0), k=10)
    assert sorted(h.text for h in near) == ["new alpha", "other alpha"]
    assert sorted(h.text for h in await index.keyword(uid, "alpha old", k=10)) == ["new alpha", "other alpha"]
    assert await count_chunks(index, uid) == 2  # the old generation is gone from storage too


async def test_every_search_sees_an_item_whole_while_it_is_replaced(index: ChunkIndex) -> None:
    """Searches run between the statements of a stream of rewrites: each sees one version's chunks, all of
    them."""
    uid = new_uid()
    size = 12

    async def write(version: int) -> None:
        texts = [f"marker version{version} part{part}" for part in range(size)]
        await put(index, uid, "i-1", "a.md", texts, [axis(0)] * size)

    async def rewrites() -> None:
        for version in range(1, 8):
            await write(version)

    async def seen() -> list[tuple[int, set[str]]]:
        near = await index.nearest(uid, axis(0), k=50)
        words = await index.keyword(uid, "marker", k=50)
        return [(len(found), {h.text.split()[1] for h in found}) for found in (near, words)]

    await write(0)
    writing = asyncio.ensure_future(rewrites())
    observations = []
    while not writing.done():
        observations += await seen()
    await writing
    observations += await seen()
    assert len(observations) > 4
    assert all(count == size and len(versions) == 1 for count, versions in observations), observations
    assert observations[-1][1] == {"version7"}


async def test_an_interrupted_replace_leaves_the_old_chunks_until_the_next_one(database: Database) -> None:
    failing = FailingDatabase(database, fail_on="INSERT INTO rag_live")
    index = await require_index(failing)
    uid = new_uid()
    await put(index, uid, "i-1", "a.md", ["first text"], [axis(0)])
    failing.armed = True
    with pytest.raises(RuntimeError):
        await put(index, uid, "i-1", "a.md", ["second text", "second more"], [axis(0)] * 2)
    failing.armed = False
    assert [h.text for h in await index.nearest(uid, axis(0), k=5)] == ["first text"]
    assert [h.text for h in await index.keyword(uid, "text second more", k=5)] == ["first text"]
    await put(index, uid, "i-1", "a.md", ["third text"], [axis(0)])
    assert [h.text for h in await index.nearest(uid, axis(0), k=5)] == ["third text"]
    assert await count_chunks(index, uid) == 1


async def test_a_write_that_started_earlier_never_hides_a_later_one(
    index: ChunkIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runners racing on one item (a stale claim): the write with the older generation loses, whenever it
    finishes."""
    uid = new_uid()
    generations = iter([200, 100])
    monkeypatch.setattr(live_items, "new_generation", lambda: next(generations))
    await put(index, uid, "i-1", "a.md", ["newer content"], [axis(0)])
    await put(index, uid, "i-1", "a.md", ["stale content", "stale more"], [axis(0)] * 2)
    assert [h.text for h in await index.nearest(uid, axis(0), k=5)] == ["newer content"]
    assert await count_chunks(index, uid) == 1


async def test_delete_item_and_drop_instance(index: ChunkIndex) -> None:
    uid, other = new_uid(), new_uid()
    await put(index, uid, "i-1", "a.md", ["alpha words"], [axis(0)])
    await put(index, uid, "i-2", "b.md", ["beta words"], [axis(1)])
    await put(index, other, "i-3", "c.md", ["gamma words"], [axis(0)])
    await index.delete_item(uid, "i-1")
    await index.delete_item(uid, "i-unknown")
    assert [h.item_id for h in await index.nearest(uid, axis(0), k=5)] == ["i-2"]
    assert [h.item_id for h in await index.keyword(uid, "words", k=5)] == ["i-2"]
    await index.drop_instance(uid)
    assert await index.nearest(uid, axis(1), k=5) == []
    assert await index.keyword(uid, "words", k=5) == []
    await index.drop_instance(uid)  # again: nothing left to drop
    assert [h.item_id for h in await index.keyword(other, "words", k=5)] == ["i-3"]
    await put(index, uid, "i-4", "d.md", ["delta words"], [axis(2, 4)] * 1)  # a dropped instance starts over
    assert [h.item_id for h in await index.nearest(uid, axis(2, 4), k=5)] == ["i-4"]


async def test_an_instance_keeps_the_dimension_of_its_first_vectors(index: ChunkIndex) -> None:
    uid = new_uid()
    await put(index, uid, "i-1", "a.md", ["text"], [axis(0)])
    with pytest.raises(InvalidInput):
        await put(index, uid, "i-2", "b.md", ["text"], [axis(0, DIMENSION + 1)])
    with pytest.raises(InvalidInput):
        await index.nearest(uid, axis(0, DIMENSION + 1), k=1)
    with pytest.raises(ValueError):
        await put(index, uid, "i-3", "c.md", ["one", "two"], [axis(0)])  # a vector per chunk
    with pytest.raises(ValueError):
        await put(index, uid, "i-3", "c.md", ["one"], [[float("nan")] * DIMENSION])
    with pytest.raises(ValueError):
        await index.nearest("../../etc", axis(0), k=1)


async def test_a_write_through_another_connection_is_seen(database: Database, database_url: str) -> None:
    """Two gateways on one database: a search reads what the other wrote, not a stale copy."""
    reader = await require_index(database)
    other_db = await open_database(database_url)
    try:
        writer = await open_index(other_db)
        uid = new_uid()
        await put(writer, uid, "i-1", "a.md", ["first"], [axis(0)])
        assert [h.text for h in await reader.nearest(uid, axis(0), k=5)] == ["first"]
        await put(writer, uid, "i-1", "a.md", ["second"], [axis(0)])
        await put(writer, uid, "i-2", "b.md", ["more"], [axis(1)])
        assert sorted(h.text for h in await reader.nearest(uid, axis(0), k=5)) == ["more", "second"]
        await writer.delete_item(uid, "i-1")
        assert [h.text for h in await reader.nearest(uid, axis(0), k=5)] == ["more"]
    finally:
        await other_db.close()


@pytest.mark.parametrize("restack_min_rows", [live_vectors.RESTACK_MIN_ROWS, 50])
def test_vectors_kept_apart_after_changes_search_like_a_fresh_stack(
    restack_min_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite's matrix after item changes (rows masked in the stacked base, changed items stacked apart, the
    base stacked again past a share) finds exactly what a matrix stacked from scratch finds."""
    monkeypatch.setattr(live_vectors, "RESTACK_MIN_ROWS", restack_min_rows)
    rng = np.random.default_rng(3)
    next_id = iter(range(1_000_000))

    def written(generation: int, folder: str) -> ItemVectors:
        rows = int(rng.integers(1, 40))
        vectors = unit_rows(rng.normal(size=(rows, DIMENSION)).astype(np.float32))
        ids = np.array([next(next_id) for _ in range(rows)], dtype=np.int64)
        return ItemVectors(generation, f"{folder}/doc.md", ids, vectors)

    items = {f"i{n}": written(0, "a" if n % 3 else "b") for n in range(40)}
    current = InstanceVectors(0, DIMENSION, items)
    for version in range(1, 40):
        changed = f"i{int(rng.integers(0, 60))}"
        items[changed] = written(version, "a")
        items.pop(f"i{int(rng.integers(0, 60))}", None)
        current = current.updated(version, items)
        fresh = InstanceVectors(version, DIMENSION, items)
        query = unit_rows(rng.normal(size=(1, DIMENSION)).astype(np.float32))[0]
        for folder in (None, frozenset(i for i, v in items.items() if v.key.startswith("b/"))):
            found, expected = current.search(query, 15, folder), fresh.search(query, 15, folder)
            assert [f[:2] for f in found] == [e[:2] for e in expected]
            assert [f[2] for f in found] == pytest.approx([e[2] for e in expected], abs=1e-6)


def hit(item_id: str, position: int = 0, score: float = 0.5) -> Hit:
    return Hit(item_id, f"{item_id}.md", position, "text", "", score)


def test_fusion_ranks_what_both_rankings_agree_on_first() -> None:
    vectors = [hit("a"), hit("b"), hit("c")]
    words = [hit("c"), hit("d"), hit("a")]
    fused = fuse([vectors, words], limit=10)
    assert [h.item_id for h in fused] == ["a", "c", "b", "d"]
    assert fused[0].score == pytest.approx(1 / 61 + 1 / 63)
    assert fused[2].score == pytest.approx(1 / 62)
    assert [h.item_id for h in fuse([vectors, words], limit=2)] == ["a", "c"]
    assert [h.score for h in fuse([[hit("x")]], limit=1, k=1)] == [0.5]
    assert fuse([[], []], limit=5) == []


def test_fusion_tells_chunks_of_one_item_apart() -> None:
    fused = fuse([[hit("a", 0), hit("a", 1)], [hit("a", 1)]], limit=5)
    assert [h.position for h in fused] == [1, 0]


async def count_chunks(index: ChunkIndex, uid: str) -> int:
    """Chunk rows stored for the instance, visible or not."""
    db: Any = index._db  # type: ignore[attr-defined]
    if db.dialect == "postgresql":
        row = await db.fetch_one(f"SELECT COUNT(*) FROM rag_chunks_{uid}")
    else:
        row = await db.fetch_one("SELECT COUNT(*) FROM rag_chunks WHERE instance_uid = ?", (uid,))
    return int(row[0])


class FailingDatabase:
    """A database whose statements containing `fail_on` raise while armed: a gateway dying mid-write."""

    def __init__(self, db: Database, fail_on: str) -> None:
        self.dialect = db.dialect
        self._db = db
        self._fail_on = fail_on
        self.armed = False

    def _check(self, sql: str) -> None:
        if self.armed and self._fail_on in sql:
            raise RuntimeError("the gateway stopped here")

    async def execute(self, sql: str, params: Params = ()) -> int:
        self._check(sql)
        return await self._db.execute(sql, params)

    async def execute_many(self, sql: str, rows: Sequence[Params]) -> None:
        self._check(sql)
        await self._db.execute_many(sql, rows)

    async def fetch_all(self, sql: str, params: Params = ()) -> list[Row]:
        return await self._db.fetch_all(sql, params)

    async def fetch_one(self, sql: str, params: Params = ()) -> Row | None:
        return await self._db.fetch_one(sql, params)

    async def migrate(self, statements: Sequence[str]) -> None:
        await self._db.migrate(statements)

    async def close(self) -> None:
        await self._db.close()
