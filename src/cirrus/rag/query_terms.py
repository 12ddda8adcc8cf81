"""What a keyword search looks for: the question's words that carry meaning, and which of them pick candidates.

English function words ("how", "do", "I", "the") are dropped outright, with no fallback: they match nearly every
chunk, so searching for them costs a ranking of nearly all chunks and ranks nothing. A question of only such
words finds nothing. Both back-ends quote each word alone, so no character of the question is read as search
syntax (quotes, operators, column filters).

A word's cost to search is its document frequency (every chunk it matches is read and scored), and its weight in
BM25 falls as that frequency grows, so the rarest words choose the candidates: `selective` keeps words, rarest
first, while their matches together stay within a budget. The common words left out still count where the
back-end scores them (PostgreSQL's ranking here); they just no longer bring in chunks of their own.
"""

import math
import re
from collections.abc import Mapping, Sequence

_WORD = re.compile(r"\w+")
_STOPWORDS = """
    a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most
    my myself no nor not of off on once only or other our ours ourselves out over own same she should so
    some such than that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with would you your
    yours yourself yourselves
"""
STOPWORDS = frozenset(_STOPWORDS.split())
BM25_K1 = 1.2
BM25_B = 0.75


def keyword_terms(query: str) -> list[str]:
    """The query's distinct lowercased words, in order, less English function words."""
    words = dict.fromkeys(_WORD.findall(query.lower()))
    return [word for word in words if word not in STOPWORDS]


def selective(frequencies: Mapping[str, int], budget: int) -> list[str]:
    """The terms whose matches pick the candidates: the rarest first while their document frequencies add up to
    at most `budget`, and always the rarest one (a question of only common words still finds something).
    Terms that match nothing are left out: they would add nothing."""
    chosen: list[str] = []
    spent = 0
    for term in sorted((term for term in frequencies if frequencies[term] > 0), key=frequencies.__getitem__):
        if chosen and spent + frequencies[term] > budget:
            break
        chosen.append(term)
        spent += frequencies[term]
    return chosen


def idf(frequency: int, documents: int) -> float:
    """BM25's inverse document frequency (Lucene's form: never negative, so a very common term still adds a
    little)."""
    return math.log(1.0 + (documents - frequency + 0.5) / (frequency + 0.5))


def idf_weights(terms: Sequence[str], frequencies: Mapping[str, int], documents: int) -> list[float]:
    return [idf(frequencies.get(term, 0), max(documents, 1)) for term in terms]
