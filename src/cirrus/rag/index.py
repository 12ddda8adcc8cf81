"""Where an instance's chunks are searched: one small interface, two back-ends in the gateway's own database.

SQLite (sqlite_index.py) is the embedded default: exact cosine search over vectors held in memory, FTS5 for
keywords. PostgreSQL (pgvector_index.py) serves gateways that share a database: pgvector's HNSW index and
PostgreSQL's full-text search. `fuse` merges a vector and a keyword ranking by reciprocal rank.
"""

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

import numpy as np

from cirrus.errors import InvalidInput
from cirrus.rag.model import ChunkText, Hit

RRF_K = 60
ItemScope = frozenset[str] | None  # the item ids a search may return; None: all
_UID = re.compile(r"[0-9a-f]{32}")


class ChunkIndex(Protocol):
    async def replace_item(
        self,
        instance_uid: str,
        item_id: str,
        key: str,
        chunks: Sequence[ChunkText],
        vectors: Sequence[Sequence[float]],
    ) -> None:
        """The item's chunks become `chunks`, atomically for readers: a search sees the old ones or the new
        ones, never part of either. An instance's vectors all have the dimension of its first ones."""
        ...

    async def delete_item(self, instance_uid: str, item_id: str) -> None: ...

    async def indexed_items(self, instance_uid: str) -> list[tuple[str, str, float]]:
        """Each searchable item's (id, key, when its visible chunks were indexed, Unix seconds): what metadata
        filters read."""
        ...

    async def drop_instance(self, instance_uid: str) -> None: ...

    async def nearest(
        self, instance_uid: str, vector: Sequence[float], k: int, items: ItemScope = None
    ) -> list[Hit]:
        """The `k` chunks most similar to `vector`, best first, scored by cosine similarity; of `items` only,
        when given (a metadata filter's choice)."""
        ...

    async def keyword(self, instance_uid: str, query: str, k: int, items: ItemScope = None) -> list[Hit]:
        """The `k` chunks that best match the query's words, best first (BM25 or the engine's like of it)."""
        ...


def fuse(rankings: Sequence[Sequence[Hit]], limit: int, k: int = RRF_K) -> list[Hit]:
    """Reciprocal rank fusion: a chunk scores the sum of 1 / (k + rank) over the rankings it is in (rank from
    1), so what several rankings place high comes first. Ties keep the order chunks were first seen in."""
    scores: dict[tuple[str, int], float] = {}
    hits: dict[tuple[str, int], Hit] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            chunk = (hit.item_id, hit.position)
            hits.setdefault(chunk, hit)
            scores[chunk] = scores.get(chunk, 0.0) + 1.0 / (k + rank)
    best = sorted(scores, key=lambda chunk: -scores[chunk])[: max(limit, 0)]
    return [replace(hits[chunk], score=scores[chunk]) for chunk in best]


def checked_uid(instance_uid: str) -> str:
    """An instance uid names tables in both back-ends, so it must be exactly what the store makes."""
    if not _UID.fullmatch(instance_uid):
        raise ValueError(f"not an instance uid: {instance_uid!r}")
    return instance_uid


def checked_vectors(chunks: Sequence[ChunkText], vectors: Sequence[Sequence[float]]) -> int:
    """The vectors' common dimension (0 for none); one vector per chunk."""
    if len(chunks) != len(vectors):
        raise ValueError(f"{len(chunks)} chunks but {len(vectors)} vectors")
    dimensions = {len(vector) for vector in vectors}
    if len(dimensions) > 1 or 0 in dimensions:
        raise ValueError(f"vectors of several dimensions: {sorted(dimensions)}")
    if vectors and not np.isfinite(np.asarray(vectors, dtype=np.float64)).all():
        raise ValueError("a vector holds NaN or infinity")
    return dimensions.pop() if dimensions else 0


def dimension_mismatch(expected: int, got: int) -> InvalidInput:
    return InvalidInput(
        f"this instance's vectors have {expected} dimensions, these {got}: its embedding model cannot change"
    )
