"""The embedded index, in the gateway's own SQLite file: nothing to run beside it.

Vectors are float32 BLOBs (unit length, so cosine is a dot product), searched with numpy over a matrix kept in
memory per instance (live_vectors.py) and reloaded item by item when `rag_index_meta.version` moves: exactly up
to 50,000 chunks, through an IVF index beyond (ivf.py; bench/RESULTS.md has the measurements behind both). This
Python's sqlite3 cannot load extensions, so sqlite-vec is not an option. Keywords go through an FTS5 table per instance
(`bm25()`), so one account's documents never weigh in another's word statistics.

Every write follows live_items.py: chunks under a new generation, one flip, then the old generation removed.
"""

import asyncio
import json
import sqlite3
from collections.abc import Sequence

import numpy as np

from cirrus.db.database import Database, Row
from cirrus.errors import InvalidInput
from cirrus.rag import live_items
from cirrus.rag.index import ItemScope, checked_uid, checked_vectors, dimension_mismatch
from cirrus.rag.live_vectors import VECTOR_DTYPE, InstanceVectors, ItemVectors, VectorCache, unit_rows
from cirrus.rag.model import ChunkText, Hit
from cirrus.rag.query_terms import keyword_terms, selective

SCHEMA = (
    live_items.SCHEMA,
    """CREATE TABLE IF NOT EXISTS rag_chunks (
        id INTEGER PRIMARY KEY,
        instance_uid TEXT NOT NULL,
        item_id TEXT NOT NULL,
        generation BIGINT NOT NULL,
        position INTEGER NOT NULL,
        heading TEXT NOT NULL,
        text TEXT NOT NULL,
        vector BLOB NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS rag_chunks_item ON rag_chunks (instance_uid, item_id, generation)",
    # version: moved by every change a search could see, so a cached matrix knows it is stale
    """CREATE TABLE IF NOT EXISTS rag_index_meta (
        instance_uid TEXT PRIMARY KEY,
        dimension INTEGER NOT NULL,
        version BIGINT NOT NULL
    )""",
)
DEFAULT_CACHE_BYTES = 1 << 30
LOAD_ITEMS = 200  # item ids per query when reloading vectors
SEARCH_TRIES = 3
KEYWORD_DEPTH = 50  # matches ranked at first
MAX_KEYWORD_DEPTH = 20_000  # past it, every match is ranked
KEYWORD_BUDGET = 2_000  # matches the words that pick candidates may have together (query_terms.selective)
_ALL = "1 = 1"


def _fts(instance_uid: str) -> str:
    return f"rag_fts_{checked_uid(instance_uid)}"


class SqliteIndex:
    """The database belongs to whoever opened it, so nothing here closes it."""

    def __init__(self, db: Database, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self._db = db
        self._cache = VectorCache(cache_bytes)
        self._reloading: dict[str, asyncio.Lock] = {}

    @classmethod
    async def open(cls, db: Database, cache_bytes: int = DEFAULT_CACHE_BYTES) -> "SqliteIndex":
        await db.migrate(SCHEMA)
        return cls(db, cache_bytes)

    async def replace_item(
        self,
        instance_uid: str,
        item_id: str,
        key: str,
        chunks: Sequence[ChunkText],
        vectors: Sequence[Sequence[float]],
    ) -> None:
        dimension = checked_vectors(chunks, vectors)
        if not chunks:
            await self.delete_item(instance_uid, item_id)
            return
        fts = await self._prepare(instance_uid, dimension)
        generation = live_items.new_generation()
        rows = unit_rows(np.asarray(vectors, dtype=np.float32)).astype(VECTOR_DTYPE)
        await self._db.execute_many(
            "INSERT INTO rag_chunks (instance_uid, item_id, generation, position, heading, text, vector)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (instance_uid, item_id, generation, chunk.position, chunk.heading, chunk.text, row.tobytes())
                for chunk, row in zip(chunks, rows, strict=True)
            ],
        )
        await self._db.execute(
            f"INSERT INTO {fts} (rowid, text) SELECT id, text FROM rag_chunks"
            " WHERE instance_uid = ? AND item_id = ? AND generation = ?",
            (instance_uid, item_id, generation),
        )
        await live_items.flip(self._db, instance_uid, item_id, key, generation)
        await self._changed(instance_uid)
        await self._remove(
            instance_uid,
            item_id,
            live_items.SUPERSEDED,
            live_items.superseded_params(instance_uid, item_id, generation),
        )

    async def indexed_items(self, instance_uid: str) -> list[tuple[str, str, float]]:
        return await live_items.indexed(self._db, instance_uid)

    async def delete_item(self, instance_uid: str, item_id: str) -> None:
        if await self._dimension(instance_uid) is None:
            return  # nothing of the instance was ever indexed
        await live_items.hide(self._db, instance_uid, item_id)
        await self._changed(instance_uid)
        await self._remove(instance_uid, item_id, _ALL, ())

    async def drop_instance(self, instance_uid: str) -> None:
        fts = _fts(instance_uid)
        await self._db.execute("DELETE FROM rag_index_meta WHERE instance_uid = ?", (instance_uid,))
        self._cache.drop(instance_uid)
        await self._db.execute(f"DROP TABLE IF EXISTS {fts}")
        await live_items.hide(self._db, instance_uid)
        await self._db.execute("DELETE FROM rag_chunks WHERE instance_uid = ?", (instance_uid,))

    async def nearest(
        self, instance_uid: str, vector: Sequence[float], k: int, items: ItemScope = None
    ) -> list[Hit]:
        """A write that removes chunks between the matrix search and the read of their text is met by
        searching again, on the newer version."""
        for search in range(SEARCH_TRIES):
            last_try = search == SEARCH_TRIES - 1
            vectors = await self._current(instance_uid)
            if vectors is None or k <= 0:
                return []
            query = _unit_query(vector, vectors.dimension)
            if query is None:
                return []
            top = await asyncio.to_thread(vectors.search, query, k, items)
            texts = await self._texts([chunk_id for chunk_id, _, _ in top])
            if len(texts) == len(top) or last_try:
                return [
                    Hit(item_id, vectors.items[item_id].key, *texts[chunk_id], score)
                    for chunk_id, item_id, score in top
                    if chunk_id in texts
                ]
        raise AssertionError("unreachable")

    async def keyword(self, instance_uid: str, query: str, k: int, items: ItemScope = None) -> list[Hit]:
        """BM25 over every word, for the chunks that hold one of the rarest (query_terms.selective): ranking
        every match of a common word is what costs. FTS5's bm25() weighs only the words of its MATCH, so two
        rankings are merged: chunks with a rare and a common word, scored on all the words, and chunks with a
        rare word, scored on the rare ones, which is their whole score where they hold no common word. A chunk
        in both keeps its score on all the words, the better. Each ranking's best `depth` hold the merged
        best `depth`. One statement keeps those visible under the prefix; fewer than `k` kept from a full
        `depth` asks again, deeper. One statement each time: one snapshot, so an item is seen as one version.
        `items` (a metadata filter's) keeps those only."""
        words = keyword_terms(query)
        if not words or k <= 0 or items == frozenset() or await self._dimension(instance_uid) is None:
            return []
        try:
            frequencies = await self._frequencies(instance_uid, words)
            chosen = selective(frequencies, KEYWORD_BUDGET)
            if not chosen:
                return []
            common = [word for word in words if frequencies[word] > 0 and word not in chosen]
            rare = _any_of(chosen)
            matches = [rare] if not common else [f"({rare}) AND ({_any_of(common)})", rare]
            return await self._best(instance_uid, matches, k, items)
        except sqlite3.OperationalError as error:
            if "no such table" in str(error):  # dropped meanwhile
                return []
            raise

    async def _frequencies(self, instance_uid: str, words: list[str]) -> dict[str, int]:
        """Each word's count of matching chunks (stale ones included), counted up to just past the budget: all
        that choosing needs, and it bounds the postings read. FTS5's bm25() weighs the chosen words itself."""
        fts = _fts(instance_uid)
        count = f"(SELECT count(*) FROM (SELECT 1 FROM {fts} WHERE {fts} MATCH ? LIMIT {KEYWORD_BUDGET + 1}))"
        row = await self._db.fetch_one(
            f"SELECT {', '.join([count] * len(words))}", [_any_of([word]) for word in words]
        )
        return dict(zip(words, (int(count) for count in row or ()), strict=True))

    async def _best(self, instance_uid: str, matches: list[str], k: int, items: ItemScope) -> list[Hit]:
        depth = max(4 * k, KEYWORD_DEPTH)
        while True:
            ranked = await self._ranked(instance_uid, matches, items, depth)
            # bm25() is lower for better matches
            hits = [
                Hit(row[0], row[1], row[2], row[4], row[3], -float(row[5]))
                for row in ranked
                if row[1] is not None
            ]
            if len(hits) >= k or len(ranked) < depth or depth < 0:
                return hits[:k]
            depth = depth * 8 if depth * 8 <= MAX_KEYWORD_DEPTH else -1  # -1: no limit

    async def _ranked(self, instance_uid: str, matches: list[str], items: ItemScope, depth: int) -> list[Row]:
        """The `depth` best matches of the merged rankings, each with its chunk where visible (and of `items`,
        if given), else NULLs. bm25() is lower for better matches, so a chunk's best score is its least."""
        fts = _fts(instance_uid)
        ranking = f"SELECT * FROM (SELECT rowid AS id, bm25({fts}) AS score FROM {fts} WHERE {fts} MATCH ?"
        ranking += " ORDER BY score LIMIT ?)"
        # A JSON array bound as one parameter: any number of ids, past SQLite's limit on parameters.
        within = "" if items is None else " AND l.item_id IN (SELECT value FROM json_each(?))"
        within_params = () if items is None else (json.dumps(sorted(items)),)
        return await self._db.fetch_all(
            f"WITH r AS ({' UNION ALL '.join([ranking] * len(matches))}),"
            " f AS (SELECT id, min(score) AS score FROM r GROUP BY id ORDER BY score LIMIT ?)"
            " SELECT c.item_id, l.key, c.position, c.heading, c.text, f.score FROM f"
            " LEFT JOIN rag_chunks c ON c.id = f.id LEFT JOIN rag_live l ON l.instance_uid = ?"
            f" AND l.item_id = c.item_id AND l.generation = c.generation{within} ORDER BY f.score",
            (*[value for match in matches for value in (match, depth)], depth, instance_uid, *within_params),
        )

    async def _prepare(self, instance_uid: str, dimension: int) -> str:
        """The instance's FTS table, its dimension set by its first vectors and checked against later ones."""
        fts = _fts(instance_uid)
        # The FTS table before the meta row, which tells readers and deletes that it exists.
        await self._db.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {fts} USING fts5(text,"
            " tokenize = 'porter unicode61 remove_diacritics 2')"
        )
        await self._db.execute(
            "INSERT INTO rag_index_meta (instance_uid, dimension, version) VALUES (?, ?, 0)"
            " ON CONFLICT (instance_uid) DO NOTHING",
            (instance_uid, dimension),
        )
        expected = await self._dimension(instance_uid)
        if expected is not None and expected != dimension:
            raise dimension_mismatch(expected, dimension)
        return fts

    async def _dimension(self, instance_uid: str) -> int | None:
        row = await self._db.fetch_one(
            "SELECT dimension FROM rag_index_meta WHERE instance_uid = ?", (checked_uid(instance_uid),)
        )
        return None if row is None else int(row[0])

    async def _changed(self, instance_uid: str) -> None:
        await self._db.execute(
            "UPDATE rag_index_meta SET version = version + 1 WHERE instance_uid = ?", (instance_uid,)
        )

    async def _remove(self, instance_uid: str, item_id: str, where: str, params: tuple[object, ...]) -> None:
        """The item's chunks that `where` selects, their FTS rows first."""
        chunks = f"FROM rag_chunks WHERE instance_uid = ? AND item_id = ? AND {where}"
        await self._db.execute(
            f"DELETE FROM {_fts(instance_uid)} WHERE rowid IN (SELECT id {chunks})",
            (instance_uid, item_id, *params),
        )
        await self._db.execute(f"DELETE {chunks}", (instance_uid, item_id, *params))

    async def _texts(self, chunk_ids: list[int]) -> dict[int, tuple[int, str, str]]:
        """Chunk id -> (position, text, heading), for those still there."""
        if not chunk_ids:
            return {}
        marks = ", ".join("?" * len(chunk_ids))
        rows = await self._db.fetch_all(
            f"SELECT id, position, text, heading FROM rag_chunks WHERE id IN ({marks})", chunk_ids
        )
        return {int(row[0]): (int(row[1]), str(row[2]), str(row[3])) for row in rows}

    async def _current(self, instance_uid: str) -> InstanceVectors | None:
        """The instance's vectors as of now; None when nothing of it is indexed."""
        meta = await self._db.fetch_one(
            "SELECT version, dimension FROM rag_index_meta WHERE instance_uid = ?",
            (checked_uid(instance_uid),),
        )
        if meta is None:
            self._cache.drop(instance_uid)
            return None
        version, dimension = int(meta[0]), int(meta[1])
        cached = self._cache.get(instance_uid)
        if cached is not None and cached.version == version:
            return cached
        async with self._reloading.setdefault(instance_uid, asyncio.Lock()):
            cached = self._cache.get(instance_uid)
            if cached is not None and cached.version >= version:
                return cached  # another search reloaded it meanwhile
            fresh = await self._reload(instance_uid, version, dimension, cached)
            self._cache.put(instance_uid, fresh)
            return fresh

    async def _reload(
        self, instance_uid: str, version: int, dimension: int, cached: InstanceVectors | None
    ) -> InstanceVectors:
        """Items whose visible generation is the cached one are kept; the others are read again. The live rows
        are read after `version`, so the result is at least as new as the version it is labelled with."""
        if cached is not None and cached.dimension != dimension:
            cached = None  # dropped and made again with other vectors
        live = await self._db.fetch_all(
            "SELECT item_id, generation FROM rag_live WHERE instance_uid = ?", (instance_uid,)
        )
        items: dict[str, ItemVectors] = {}
        stale: list[str] = []
        for item_id, generation in live:
            if cached is not None and cached.generation(item_id) == generation:
                items[item_id] = cached.items[item_id]
            else:
                stale.append(item_id)
        for start in range(0, len(stale), LOAD_ITEMS):
            items.update(await self._read_items(instance_uid, dimension, stale[start : start + LOAD_ITEMS]))
        if cached is None:
            return await asyncio.to_thread(InstanceVectors, version, dimension, items)
        return await asyncio.to_thread(cached.updated, version, items)

    async def _read_items(
        self, instance_uid: str, dimension: int, item_ids: list[str]
    ) -> dict[str, ItemVectors]:
        """Each item's chunks of the generation live as this one statement reads them: all of that generation,
        since its chunks are written before its flip and removed only once it is superseded or hidden. An
        item deleted since it was listed is absent."""
        marks = ", ".join("?" * len(item_ids))
        rows = await self._db.fetch_all(
            "SELECT l.item_id, l.generation, l.key, c.id, c.vector FROM rag_live l JOIN rag_chunks c"
            " ON c.instance_uid = l.instance_uid AND c.item_id = l.item_id AND c.generation = l.generation"
            f" WHERE l.instance_uid = ? AND l.item_id IN ({marks})",
            (instance_uid, *item_ids),
        )
        found: dict[str, list[Row]] = {}
        for row in rows:
            found.setdefault(row[0], []).append(row)
        return {item_id: _item_vectors(dimension, item_rows) for item_id, item_rows in found.items()}


def _any_of(words: list[str]) -> str:
    """An FTS5 expression matching any of the words, each quoted: no character of theirs is search syntax."""
    return " OR ".join('"' + word.replace('"', '""') + '"' for word in words)


def _item_vectors(dimension: int, rows: list[Row]) -> ItemVectors:
    """One item's rows of (item id, generation, key, chunk id, vector)."""
    ids = np.array([row[3] for row in rows], dtype=np.int64)
    vectors = np.frombuffer(b"".join(row[4] for row in rows), dtype=VECTOR_DTYPE).reshape(-1, dimension)
    return ItemVectors(int(rows[0][1]), str(rows[0][2]), ids, vectors.astype(np.float32))


def _unit_query(
    vector: Sequence[float], dimension: int
) -> "np.ndarray[tuple[int], np.dtype[np.float32]] | None":
    query = np.asarray(vector, dtype=np.float32)
    if query.shape != (dimension,):
        raise InvalidInput(f"the query vector has {query.size} dimensions; this instance's have {dimension}")
    norm = float(np.linalg.norm(query))
    if norm == 0 or not np.isfinite(norm):
        return None
    return (query / norm).astype(np.float32)
