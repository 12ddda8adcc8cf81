"""The chunk index a gateway's database holds: pgvector's on PostgreSQL, SQLite's own otherwise."""

from cirrus.db.database import Database
from cirrus.rag.index import ChunkIndex
from cirrus.rag.pgvector_index import PgvectorIndex, VectorExtensionMissing
from cirrus.rag.sqlite_index import SqliteIndex

__all__ = ["VectorExtensionMissing", "open_index"]


async def open_index(db: Database) -> ChunkIndex:
    """The index in `db` itself. Raises VectorExtensionMissing where PostgreSQL lacks pgvector."""
    if db.dialect == "postgresql":
        return await PgvectorIndex.open(db)
    return await SqliteIndex.open(db)
