"""bench/rag.py's pure parts: recall@k and MRR by module, the pydoc-to-Markdown corpus, the labelled questions."""

import importlib.util

import pytest
from bench.rag_corpus import module_markdown
from bench.rag_quality import agreement, answer_rank, document_key, module_of, scores
from bench.rag_questions import CORPUS_MODULES, QUESTIONS


def test_answer_rank_is_the_first_chunk_from_the_expected_module() -> None:
    assert answer_rank(["json", "csv", "csv"], "csv") == 2
    assert answer_rank(["csv"], "csv") == 1
    assert answer_rank(["json", "re"], "csv") is None
    assert answer_rank([], "csv") is None


def test_recall_counts_answers_within_k_and_mrr_averages_reciprocal_ranks() -> None:
    result = scores([1, 3, None, 6, 2], k=5)
    assert result.questions == 5
    assert result.recall == pytest.approx(3 / 5)
    # rank 6 is past k but still counts for MRR; an unanswered question counts 0
    assert result.mrr == pytest.approx((1 + 1 / 3 + 1 / 6 + 1 / 2) / 5)


def test_rank_k_itself_is_within_recall_at_k() -> None:
    assert scores([5], k=5).recall == 1.0
    assert scores([6], k=5).recall == 0.0


def test_scores_refuse_an_empty_question_set() -> None:
    with pytest.raises(ValueError):
        scores([], k=5)


def test_agreement_splits_questions_by_which_ranking_answered_them() -> None:
    vector = [1, 2, None, 7, None]
    keyword = [3, None, 1, None, None]
    hybrid = [1, 8, 2, 4, 5]
    split = agreement(vector, keyword, hybrid, k=5)
    assert (split.both, split.vector_only, split.keyword_only, split.neither) == (1, 1, 1, 2)
    assert (split.hybrid_in_both, split.hybrid_in_vector_only, split.hybrid_in_keyword_only) == (1, 0, 1)
    assert split.hybrid_in_neither == 2


def test_agreement_needs_the_same_questions_in_each_ranking() -> None:
    with pytest.raises(ValueError):
        agreement([1], [1, 2], [1], k=5)


@pytest.mark.parametrize("module", ["csv", "xml.etree.ElementTree", "concurrent.futures"])
def test_a_module_round_trips_through_its_document_key(module: str) -> None:
    assert module_of(document_key(module)) == module


def test_module_markdown_has_a_heading_per_class_and_function_and_drops_boilerplate() -> None:
    markdown = module_markdown("csv")
    lines = markdown.splitlines()
    assert lines[0] == "# csv"
    for heading in ("## Description", "## Classes", "### class DictReader", "## Functions", "### reader()"):
        assert heading in lines
    assert "inherited from" not in markdown  # Error's inherited Exception methods are left out
    assert "## File" not in lines and "## Module reference" not in lines
    assert "writerow(self, rowdict)" in markdown  # a class's own methods stay, without pydoc's " |  " margin
    assert not any(line.startswith("     |") for line in lines)


def test_question_set_size_and_uniqueness() -> None:
    assert 80 <= len(QUESTIONS) <= 150
    assert len({question for question, _ in QUESTIONS}) == len(QUESTIONS)
    assert len(set(CORPUS_MODULES)) == len(CORPUS_MODULES)


def test_every_labelled_module_is_in_the_corpus_and_in_this_python() -> None:
    labelled = {module for _, module in QUESTIONS}
    assert labelled <= set(CORPUS_MODULES), sorted(labelled - set(CORPUS_MODULES))
    missing = [module for module in CORPUS_MODULES if importlib.util.find_spec(module) is None]
    assert missing == []
