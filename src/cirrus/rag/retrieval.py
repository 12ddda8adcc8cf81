"""From a question to the chunks that answer it: by meaning (the query's embedding against the chunks'), by words
(BM25 over the chunks' text), or both fused by reciprocal rank, as Cloudflare's AI Search does.

A match threshold applies to vector similarity only: BM25 scores have no fixed scale, and a fused rank score
(1/61 for the best) says nothing on its own about how well a chunk matches.
"""

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from cirrus.rag.index import ChunkIndex, ItemScope, fuse
from cirrus.rag.model import Hit

EmbedQuery = Callable[[str], Awaitable[list[float]]]
RRF_K = 60


class RetrievalType(StrEnum):
    VECTOR = "vector"
    KEYWORD = "keyword"
    HYBRID = "hybrid"


@dataclass(frozen=True)
class Retrieval:
    query: str
    max_results: int
    kind: RetrievalType = RetrievalType.VECTOR
    threshold: float = 0.0  # the lowest cosine similarity a vector match may have
    items: ItemScope = None  # only these items (a metadata filter's), else all


@dataclass(frozen=True)
class Scored:
    """A retrieved chunk with how it was found: each ranking's score and 1-based rank, where it was in one."""

    hit: Hit
    score: float
    vector_score: float | None = None
    vector_rank: int | None = None
    keyword_score: float | None = None
    keyword_rank: int | None = None

    @property
    def fused(self) -> bool:
        return self.vector_rank is not None and self.keyword_rank is not None


async def retrieve(
    index: ChunkIndex, instance_uid: str, retrieval: Retrieval, embed: EmbedQuery
) -> list[Scored]:
    """The best `max_results` chunks for the query, best first. A hybrid search runs its keyword ranking while
    the query is embedded and its vectors searched: the two share nothing until they are fused."""
    limit = retrieval.max_results
    words_task = (
        asyncio.create_task(index.keyword(instance_uid, retrieval.query, _depth(retrieval), retrieval.items))
        if retrieval.kind is not RetrievalType.VECTOR
        else None
    )
    try:
        vectors = await _by_vector(index, instance_uid, retrieval, embed)
        words = await words_task if words_task is not None else []
    finally:
        if words_task is not None and not words_task.done():  # the vector side failed: stop the other
            words_task.cancel()
            with contextlib.suppress(BaseException):
                await words_task
    if retrieval.kind is RetrievalType.VECTOR:
        return [_scored(hit, hit.score, vectors, words) for hit in vectors[:limit]]
    if retrieval.kind is RetrievalType.KEYWORD:
        return [_scored(hit, hit.score, vectors, words) for hit in words[:limit]]
    return [_scored(hit, hit.score, vectors, words) for hit in fuse([vectors, words], limit, RRF_K)]


async def _by_vector(
    index: ChunkIndex, instance_uid: str, retrieval: Retrieval, embed: EmbedQuery
) -> list[Hit]:
    if retrieval.kind is RetrievalType.KEYWORD:
        return []
    vector = await embed(retrieval.query)
    found = await index.nearest(instance_uid, vector, _depth(retrieval), retrieval.items)
    return [hit for hit in found if hit.score >= retrieval.threshold]


def _depth(retrieval: Retrieval) -> int:
    """How many each ranking returns: fusion needs more than the final count to find what both agree on."""
    return retrieval.max_results if retrieval.kind is not RetrievalType.HYBRID else retrieval.max_results * 3


def _scored(hit: Hit, score: float, vectors: Sequence[Hit], words: Sequence[Hit]) -> Scored:
    vector_rank, vector_score = _rank_of(hit, vectors)
    keyword_rank, keyword_score = _rank_of(hit, words)
    return Scored(hit, score, vector_score, vector_rank, keyword_score, keyword_rank)


def _rank_of(hit: Hit, ranking: Sequence[Hit]) -> tuple[int | None, float | None]:
    for rank, other in enumerate(ranking, start=1):
        if (other.item_id, other.position) == (hit.item_id, hit.position):
            return rank, other.score
    return None, None
