"""Keyword search's terms and ranking on both back-ends: function words dropped, rare words picking the
candidates within a budget, BM25 on PostgreSQL (a rare word outranks a common one repeated), a question of only
function words finding nothing, and every search seeing an item whole while it is rewritten."""

import asyncio
import math
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from cirrus.db import Database
from cirrus.rag import ChunkIndex, pg_keyword, sqlite_index
from cirrus.rag.query_terms import idf, keyword_terms, selective
from tests.unit.test_rag_index import axis, new_uid, put, require_index

COMMON = [
    "file handling file objects file modes",
    "reading a file",
    "writing a file",
    "file paths",
    "closing a file",
    "file locks",
]


@pytest_asyncio.fixture(loop_scope="function")
async def index(database: Database) -> AsyncIterator[ChunkIndex]:
    yield await require_index(database)


def test_function_words_are_dropped_and_the_rest_kept_once_in_order() -> None:
    assert keyword_terms("How do I load a TOML configuration file? The TOML one.") == [
        "load",
        "toml",
        "configuration",
        "file",
        "one",
    ]
    assert keyword_terms("How do I do it?") == []
    assert keyword_terms("") == []


def test_the_rarest_terms_pick_candidates_within_the_budget() -> None:
    frequencies = {"file": 900, "toml": 3, "load": 200, "absent": 0}
    assert selective(frequencies, budget=250) == ["toml", "load"]
    assert selective(frequencies, budget=2_000) == ["toml", "load", "file"]
    assert selective({"file": 900, "path": 700}, budget=10) == ["path"]  # the rarest, over budget
    assert selective({"absent": 0}, budget=10) == []


def test_a_rarer_term_weighs_more_and_none_weighs_less_than_nothing() -> None:
    assert idf(1, 1_000) > idf(10, 1_000) > idf(900, 1_000) > 0
    assert idf(1_000, 1_000) == pytest.approx(math.log(1 + 0.5 / 1_000.5))


async def test_a_question_of_only_function_words_finds_nothing(index: ChunkIndex) -> None:
    uid = new_uid()
    await put(index, uid, "i-1", "a.md", ["how do I do it", "what is this"], [axis(0), axis(1)])
    assert await index.keyword(uid, "How do I do it?", k=5) == []
    assert await index.keyword(uid, "?!", k=5) == []


async def test_a_rare_word_outranks_a_common_one_repeated(index: ChunkIndex, database: Database) -> None:
    uid = new_uid()
    texts = ["toml settings", *COMMON]
    await put(index, uid, "i-1", "a.md", texts, [axis(n % 8) for n in range(len(texts))])
    hits = await index.keyword(uid, "Which file holds TOML?", k=3)
    assert hits[0].text == "toml settings"
    if database.dialect == "postgresql":  # BM25 rather than ts_rank_cd, which put "file" x3 first
        assert hits[1].text == COMMON[0]
        assert hits[0].score > hits[1].score > hits[2].score > 0
        await database.execute(f"ANALYZE rag_chunks_{uid}")  # "file" now weighed by ANALYZE's sample
        analysed = await index.keyword(uid, "Which file holds TOML?", k=3)
        assert [hit.text for hit in analysed] == [hit.text for hit in hits]


def candidate_budget(monkeypatch: pytest.MonkeyPatch, chunks: int) -> None:
    """The most candidates a keyword search's rarest words may pick, on both back-ends."""
    monkeypatch.setattr(sqlite_index, "KEYWORD_BUDGET", chunks)
    monkeypatch.setattr(pg_keyword, "CANDIDATE_BUDGET", chunks)


async def test_common_words_beyond_the_budget_bring_no_candidates_but_still_weigh(
    index: ChunkIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    candidate_budget(monkeypatch, 3)
    uid = new_uid()
    texts = ["toml settings format", "toml file format", *COMMON]
    await put(index, uid, "i-1", "a.md", texts, [axis(n % 8) for n in range(len(texts))])
    hits = await index.keyword(uid, "toml file", k=10)
    assert [hit.text for hit in hits] == ["toml file format", "toml settings format"]  # "file" still weighs


async def test_a_word_that_matches_nothing_is_left_out(index: ChunkIndex) -> None:
    uid = new_uid()
    await put(index, uid, "i-1", "a.md", ["toml settings", "yaml settings"], [axis(0), axis(1)])
    assert [hit.text for hit in await index.keyword(uid, "toml kiwi", k=5)] == ["toml settings"]
    assert await index.keyword(uid, "kiwi", k=5) == []


async def test_a_rare_and_a_common_word_see_an_item_whole_while_it_is_rewritten(
    index: ChunkIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The counts and the ranking are two statements; only the ranking decides what is visible."""
    candidate_budget(monkeypatch, 12)
    uid = new_uid()
    size = 6
    await put(index, uid, "i-common", "c.md", COMMON * 3, [axis(0)] * len(COMMON) * 3)

    async def write(version: int) -> None:
        texts = [f"marker file version{version} part{part}" for part in range(size)]
        await put(index, uid, "i-1", "a.md", texts, [axis(1)] * size)

    async def rewrites() -> None:
        for version in range(1, 8):
            await write(version)

    async def seen() -> tuple[int, set[str]]:
        found = [hit for hit in await index.keyword(uid, "marker file", k=50) if hit.item_id == "i-1"]
        return len(found), {hit.text.split()[2] for hit in found}

    await write(0)
    writing = asyncio.ensure_future(rewrites())
    observations = []
    while not writing.done():
        observations.append(await seen())
    await writing
    observations.append(await seen())
    assert len(observations) > 2
    assert all(count == size and len(versions) == 1 for count, versions in observations), observations
    assert observations[-1][1] == {"version7"}
