"""Retrieval over a fake index: vector, keyword and hybrid rankings, the threshold on vectors only, and a hybrid
search whose keyword ranking runs while the query is being embedded."""

import asyncio
from typing import Any

import pytest

from cirrus.errors import CapacityExceeded
from cirrus.rag.model import Hit
from cirrus.rag.retrieval import Retrieval, RetrievalType, retrieve


def hit(item: str, score: float) -> Hit:
    return Hit(item, f"{item}.md", 0, f"text of {item}", "", score)


class FakeIndex:
    """Fixed rankings; `keyword_started` is set when the keyword search begins, `keyword_cancelled` when it is
    stopped halfway."""

    def __init__(self, by_vector: list[Hit], by_words: list[Hit], keyword_wait: asyncio.Event | None = None):
        self.by_vector, self.by_words = by_vector, by_words
        self.keyword_wait = keyword_wait
        self.keyword_started = asyncio.Event()
        self.keyword_cancelled = False

    async def nearest(self, uid: str, vector: list[float], k: int, items: frozenset[str] | None) -> list[Hit]:
        return self.by_vector[:k]

    async def keyword(self, uid: str, query: str, k: int, items: frozenset[str] | None) -> list[Hit]:
        self.keyword_started.set()
        try:
            if self.keyword_wait is not None:
                await self.keyword_wait.wait()
        except asyncio.CancelledError:
            self.keyword_cancelled = True
            raise
        return self.by_words[:k]


async def embed(text: str) -> list[float]:
    return [1.0, 0.0]


async def test_each_kind_returns_its_ranking_and_hybrid_fuses_them() -> None:
    index: Any = FakeIndex([hit("a", 0.9), hit("b", 0.8)], [hit("b", 7.0), hit("c", 5.0)])
    vector = await retrieve(index, "uid", Retrieval("q", 5, RetrievalType.VECTOR), embed)
    keyword = await retrieve(index, "uid", Retrieval("q", 5, RetrievalType.KEYWORD), embed)
    hybrid = await retrieve(index, "uid", Retrieval("q", 5, RetrievalType.HYBRID), embed)
    assert [s.hit.item_id for s in vector] == ["a", "b"] and vector[0].keyword_rank is None
    assert [s.hit.item_id for s in keyword] == ["b", "c"]
    assert hybrid[0].hit.item_id == "b" and hybrid[0].fused  # second by vectors, first by words
    assert {s.hit.item_id for s in hybrid} == {"a", "b", "c"}


async def test_the_threshold_cuts_vector_matches_only() -> None:
    index: Any = FakeIndex([hit("a", 0.9), hit("b", 0.2)], [hit("b", 7.0)])
    vector = await retrieve(index, "uid", Retrieval("q", 5, RetrievalType.VECTOR, threshold=0.5), embed)
    keyword = await retrieve(index, "uid", Retrieval("q", 5, RetrievalType.KEYWORD, threshold=0.5), embed)
    assert [s.hit.item_id for s in vector] == ["a"] and [s.hit.item_id for s in keyword] == ["b"]


async def test_hybrid_searches_words_while_the_query_is_embedded() -> None:
    index = FakeIndex([hit("a", 0.9)], [hit("b", 7.0)])

    async def slow_embed(text: str) -> list[float]:
        await asyncio.wait_for(index.keyword_started.wait(), 1.0)  # sequential code would never get here
        return [1.0, 0.0]

    found = await retrieve(index, "uid", Retrieval("q", 5, RetrievalType.HYBRID), slow_embed)  # type: ignore[arg-type]
    assert {s.hit.item_id for s in found} == {"a", "b"}


async def test_a_failed_embedding_stops_the_keyword_search_and_raises_as_it_was() -> None:
    index = FakeIndex([hit("a", 0.9)], [hit("b", 7.0)], keyword_wait=asyncio.Event())

    async def refused(text: str) -> list[float]:
        await index.keyword_started.wait()
        raise CapacityExceeded("busy")

    with pytest.raises(CapacityExceeded):
        await retrieve(index, "uid", Retrieval("q", 5, RetrievalType.HYBRID), refused)  # type: ignore[arg-type]
    assert index.keyword_cancelled
