"""Retrieval quality by module, bench/rag.py's pure part: a question is answered at rank r when the r-th chunk
retrieved is the first from its module's document.

recall@k: the share of questions answered within the first k chunks. MRR: the mean of 1/r over all questions,
0 for one not answered within the chunks retrieved (so it is MRR at the search's result count).
"""

from collections.abc import Sequence
from dataclasses import dataclass

DOCUMENT_SUFFIX = ".md"


def document_key(module: str) -> str:
    return f"{module}{DOCUMENT_SUFFIX}"


def module_of(key: str) -> str:
    return key.removesuffix(DOCUMENT_SUFFIX)


def answer_rank(retrieved_modules: Sequence[str], expected: str) -> int | None:
    """The 1-based rank of the first chunk from the expected module, None if no chunk is."""
    for rank, module in enumerate(retrieved_modules, start=1):
        if module == expected:
            return rank
    return None


@dataclass(frozen=True)
class Scores:
    questions: int
    recall: float  # at `k`
    mrr: float
    k: int


def scores(ranks: Sequence[int | None], k: int) -> Scores:
    """recall@k and MRR over the questions' answer ranks."""
    if not ranks:
        raise ValueError("no questions to score")
    within = sum(1 for rank in ranks if rank is not None and rank <= k)
    reciprocal = sum(1.0 / rank for rank in ranks if rank is not None)
    return Scores(len(ranks), within / len(ranks), reciprocal / len(ranks), k)


@dataclass(frozen=True)
class Agreement:
    """How the two rankings' hits within k split the questions, and what fusion made of each part."""

    both: int
    vector_only: int
    keyword_only: int
    neither: int
    hybrid_in_both: int
    hybrid_in_vector_only: int
    hybrid_in_keyword_only: int
    hybrid_in_neither: int


def agreement(
    vector: Sequence[int | None], keyword: Sequence[int | None], hybrid: Sequence[int | None], k: int
) -> Agreement:
    """The three retrievals' answer ranks for the same questions, in the same order."""
    if not len(vector) == len(keyword) == len(hybrid):
        raise ValueError("the three retrievals must rank the same questions")
    parts = {(True, True): [0, 0], (True, False): [0, 0], (False, True): [0, 0], (False, False): [0, 0]}
    for ranks in zip(vector, keyword, hybrid, strict=True):
        found = [rank is not None and rank <= k for rank in ranks]
        part = parts[(found[0], found[1])]
        part[0] += 1
        part[1] += found[2]
    return Agreement(
        both=parts[(True, True)][0],
        vector_only=parts[(True, False)][0],
        keyword_only=parts[(False, True)][0],
        neither=parts[(False, False)][0],
        hybrid_in_both=parts[(True, True)][1],
        hybrid_in_vector_only=parts[(True, False)][1],
        hybrid_in_keyword_only=parts[(False, True)][1],
        hybrid_in_neither=parts[(False, False)][1],
    )
