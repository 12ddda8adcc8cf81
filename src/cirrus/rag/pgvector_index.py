"""The shared index, for gateways on one PostgreSQL: the pgvector extension, in the database itself.

A table per instance (`rag_chunks_<uid>`): its `embedding vector(n)` takes the dimension of the instance's first
vectors, with an HNSW index on cosine distance, and a stored `tsvector` with a GIN index for keywords
(BM25 computed in SQL: pg_keyword.py). Each HNSW graph holds one instance's chunks, so a search needs no
filter to stay inside its instance, one instance's size never slows another's, and a drop is a DROP TABLE.

Writes follow live_items.py (generations, one flip), in statements of WRITE_BATCH chunks: every statement must
end well within the gateway's database deadline, and inserting into an HNSW graph is the cost. A search keeps a
chunk only where its generation is its item's live one, and pgvector's iterative scan (0.8+) reads further into
the graph until enough chunks pass that test and are of a metadata filter's items, if any. `rag_nearest` sets
that scan and its breadth (`hnsw.ef_search`, which also caps the rows returned, 40 by default) for its own
statement only: a function can set them locally, one plain statement cannot.
"""

from collections.abc import Sequence

import numpy as np
import psycopg

from cirrus.db.database import Database, Row
from cirrus.errors import InvalidInput
from cirrus.rag import live_items, pg_keyword
from cirrus.rag.index import ItemScope, checked_uid, checked_vectors, dimension_mismatch
from cirrus.rag.model import ChunkText, Hit

WRITE_BATCH = 100
HNSW_MAX_DIMENSIONS = 2000  # pgvector indexes `vector` up to this; wider ones are searched exactly
MAX_EF_SEARCH = 1000
NEAREST_FUNCTION = """CREATE OR REPLACE FUNCTION rag_nearest(
    chunks TEXT, instance TEXT, query vector, k INTEGER, items TEXT[]
) RETURNS TABLE (
    item_id TEXT, key TEXT, chunk_position INTEGER, heading TEXT, chunk_text TEXT, score DOUBLE PRECISION
) LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('hnsw.ef_search', least(greatest(k, 40), 1000)::text, true);
    PERFORM set_config('hnsw.iterative_scan', 'relaxed_order', true);
    RETURN QUERY EXECUTE format(
        'SELECT c.item_id, c.key, c.position, c.heading, c.text, 1 - (c.embedding <=> $1) FROM %I c'
        ' WHERE c.generation = (SELECT l.generation FROM rag_live l'
        ' WHERE l.instance_uid = $3 AND l.item_id = c.item_id)%s ORDER BY c.embedding <=> $1 LIMIT $2',
        chunks,
        CASE WHEN items IS NULL THEN '' ELSE ' AND c.item_id = ANY($4)' END
    ) USING query, k, instance, items;
END
$$"""
SCHEMA = (
    live_items.SCHEMA,
    "DROP FUNCTION IF EXISTS rag_nearest(TEXT, TEXT, vector, INTEGER, TEXT)",  # by key prefix, before filters
    """CREATE TABLE IF NOT EXISTS rag_vector_tables (
        instance_uid TEXT PRIMARY KEY,
        dimension INTEGER NOT NULL
    )""",
    NEAREST_FUNCTION,
)


class VectorExtensionMissing(RuntimeError):
    """The PostgreSQL server has no pgvector, or this role may not create the extension."""


async def vector_available(db: Database) -> bool:
    """Whether the server has pgvector to install (or installed)."""
    found = await db.fetch_one("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
    return found is not None


def _table(instance_uid: str) -> str:
    return f"rag_chunks_{checked_uid(instance_uid)}"


def _table_schema(instance_uid: str, dimension: int) -> list[str]:
    table = _table(instance_uid)
    statements = [
        f"""CREATE TABLE IF NOT EXISTS {table} (
            item_id TEXT NOT NULL,
            generation BIGINT NOT NULL,
            key TEXT NOT NULL,
            position INTEGER NOT NULL,
            heading TEXT NOT NULL,
            text TEXT NOT NULL,
            embedding vector({dimension}) NOT NULL,
            words tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, text)) STORED
        )""",
        f"CREATE INDEX IF NOT EXISTS {table}_item ON {table} (item_id, generation)",
        f"CREATE INDEX IF NOT EXISTS {table}_words ON {table} USING gin (words)",
        "INSERT INTO rag_vector_tables (instance_uid, dimension)"
        f" VALUES ('{instance_uid}', {dimension}) ON CONFLICT (instance_uid) DO NOTHING",
    ]
    if dimension <= HNSW_MAX_DIMENSIONS:
        statements.insert(
            1, f"CREATE INDEX IF NOT EXISTS {table}_hnsw ON {table} USING hnsw (embedding vector_cosine_ops)"
        )
    return statements


def _vector_text(vector: Sequence[float]) -> str:
    """pgvector's text form, which psycopg sends faster than a float array (measured: 2.5x)."""
    return "[" + ",".join(map(str, np.asarray(vector, dtype=np.float64).tolist())) + "]"


class PgvectorIndex:
    """The database belongs to whoever opened it, so nothing here closes it."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._dimensions: dict[str, int] = {}  # instances whose table is known to exist

    @classmethod
    async def open(cls, db: Database) -> "PgvectorIndex":
        await _create_extension(db)
        await db.migrate(SCHEMA)
        return cls(db)

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
        table = await self._prepare(instance_uid, dimension)
        generation = live_items.new_generation()
        rows = [
            (item_id, generation, key, chunk.position, chunk.heading, chunk.text, _vector_text(vector))
            for chunk, vector in zip(chunks, vectors, strict=True)
        ]
        insert = (
            f"INSERT INTO {table} (item_id, generation, key, position, heading, text, embedding)"
            " VALUES (?, ?, ?, ?, ?, ?, ?::vector)"
        )
        for start in range(0, len(rows), WRITE_BATCH):
            await self._db.execute_many(insert, rows[start : start + WRITE_BATCH])
        await live_items.flip(self._db, instance_uid, item_id, key, generation)
        await self._db.execute(
            f"DELETE FROM {table} WHERE item_id = ? AND {live_items.SUPERSEDED}",
            (item_id, *live_items.superseded_params(instance_uid, item_id, generation)),
        )

    async def indexed_items(self, instance_uid: str) -> list[tuple[str, str, float]]:
        return await live_items.indexed(self._db, instance_uid)

    async def delete_item(self, instance_uid: str, item_id: str) -> None:
        if await self._dimension(instance_uid) is None:
            return
        await live_items.hide(self._db, instance_uid, item_id)
        try:
            await self._db.execute(f"DELETE FROM {_table(instance_uid)} WHERE item_id = ?", (item_id,))
        except psycopg.errors.UndefinedTable:
            self._dimensions.pop(instance_uid, None)  # dropped meanwhile

    async def drop_instance(self, instance_uid: str) -> None:
        table = _table(instance_uid)
        await self._db.execute("DELETE FROM rag_vector_tables WHERE instance_uid = ?", (instance_uid,))
        self._dimensions.pop(instance_uid, None)
        await live_items.hide(self._db, instance_uid)
        await self._db.migrate([f"DROP TABLE IF EXISTS {table}"])

    async def nearest(
        self, instance_uid: str, vector: Sequence[float], k: int, items: ItemScope = None
    ) -> list[Hit]:
        dimension = await self._dimension(instance_uid)
        if dimension is None or k <= 0 or items == frozenset():
            return []
        if len(vector) != dimension:
            raise InvalidInput(
                f"the query vector has {len(vector)} dimensions; this instance's have {dimension}"
            )
        norm = float(np.linalg.norm(np.asarray(vector, dtype=np.float64)))
        if norm == 0 or not np.isfinite(norm):
            return []
        rows = await self._rows(
            "SELECT item_id, key, chunk_position, heading, chunk_text, score"
            " FROM rag_nearest(?, ?, ?::vector, ?, ?::text[])",
            (_table(instance_uid), instance_uid, _vector_text(vector), min(k, MAX_EF_SEARCH), _ids(items)),
            instance_uid,
        )
        # The iterative scan's relaxed order may leave neighbours slightly out of order.
        hits = [Hit(row[0], row[1], row[2], row[4], row[3], float(row[5])) for row in rows]
        return sorted(hits, key=lambda hit: -hit.score)

    async def keyword(self, instance_uid: str, query: str, k: int, items: ItemScope = None) -> list[Hit]:
        """BM25 over the question's rarest lexemes' matches (pg_keyword.py)."""
        if k <= 0 or items == frozenset() or await self._dimension(instance_uid) is None:
            return []

        async def fetch(sql: str, params: Sequence[object]) -> list[Row]:
            return await self._rows(sql, params, instance_uid)

        rows = await pg_keyword.ranked_rows(fetch, _table(instance_uid), instance_uid, query, k, _ids(items))
        return [Hit(row[0], row[1], row[2], row[4], row[3], float(row[5])) for row in rows]

    async def _rows(self, sql: str, params: Sequence[object], instance_uid: str) -> list[Row]:
        """A search's rows; none where the instance's table was dropped meanwhile (by another gateway)."""
        try:
            return await self._db.fetch_all(sql, params)
        except psycopg.errors.UndefinedTable:
            self._dimensions.pop(instance_uid, None)
            return []

    async def _prepare(self, instance_uid: str, dimension: int) -> str:
        """The instance's table, made by its first vectors, whose dimension later ones must have."""
        expected = await self._dimension(instance_uid)
        if expected is None:
            await self._db.migrate(_table_schema(instance_uid, dimension))
            expected = await self._dimension(instance_uid)
        if expected != dimension:
            raise dimension_mismatch(expected or 0, dimension)
        return _table(instance_uid)

    async def _dimension(self, instance_uid: str) -> int | None:
        known = self._dimensions.get(checked_uid(instance_uid))
        if known is not None:
            return known
        row = await self._db.fetch_one(
            "SELECT dimension FROM rag_vector_tables WHERE instance_uid = ?", (instance_uid,)
        )
        if row is None:
            return None
        self._dimensions[instance_uid] = int(row[0])
        return int(row[0])


async def _create_extension(db: Database) -> None:
    """pgvector, installed in the database unless it already is; a clear error where it cannot be."""
    if not await vector_available(db):
        raise VectorExtensionMissing(
            "AI Search on PostgreSQL needs the pgvector extension, which this server lacks:"
            " install it (Debian: postgresql-<major>-pgvector; scripts/bootstrap.sh --test-services builds it)"
        )
    try:
        await db.migrate(["CREATE EXTENSION IF NOT EXISTS vector"])
    except psycopg.errors.InsufficientPrivilege as error:
        raise VectorExtensionMissing(
            "AI Search on PostgreSQL needs the pgvector extension in this database: have its owner or a"
            " superuser run CREATE EXTENSION vector"
        ) from error


def _ids(items: ItemScope) -> list[str] | None:
    """A metadata filter's items as a text array parameter (sorted: the same filter, the same statement)."""
    return None if items is None else sorted(items)
