"""Keyword search on PostgreSQL, ranked by BM25: `ts_rank_cd` knows no collection statistics, so "file" would
weigh as much as "TOML" (bench/RESULTS.md, issue 17).

Two statements. The first turns the question into PostgreSQL's English lexemes (its stemmer and stopwords, as
the stored `tsvector` has them) and finds each one's document frequency: sampled by ANALYZE for common lexemes,
counted through the GIN index for the others; nothing is cached here, the statistics are the table's own. The
second picks candidates by the rarest lexemes only (query_terms.selective: bounded, whatever the question),
keeps those whose generation is their item's live one (and of a metadata filter's items), scores them by BM25 over
every lexeme of the question: a lexeme's frequency in the chunk from its positions in the chunk's `tsvector`,
a chunk's length as its count of distinct lexemes, the average length over the candidates. That second
statement alone decides what is visible, in one snapshot: an item is seen whole, old chunks or new. The counts
may be a write older or newer; they only weigh the terms.
"""

from collections.abc import Awaitable, Callable, Sequence

from cirrus.db.database import Row
from cirrus.rag.query_terms import BM25_B, BM25_K1, idf_weights, keyword_terms, selective

Fetch = Callable[[str, Sequence[object]], Awaitable[list[Row]]]
CANDIDATE_BUDGET = 2_000  # matches the selective lexemes may have together
MAX_CANDIDATES = 2_000  # rows scored at most, where the rarest lexeme alone has more matches

# A lexeme among the column's most common elements (ANALYZE's sample, kept by autovacuum) takes its sampled
# frequency: counting a common lexeme's rows costs as many heap visits as it has rows. Any other is counted
# through the GIN index, cheaply since it is not common (or the table not yet analysed).
_FREQUENCIES = """WITH stats AS (
    SELECT s.most_common_elems::text::text[] AS elements, s.most_common_elem_freqs AS shares, c.reltuples AS size
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_stats s ON s.schemaname = n.nspname AND s.tablename = c.relname AND s.attname = 'words'
    WHERE c.oid = ?::regclass
)
SELECT t.lexeme,
    coalesce(
        CASE WHEN stats.size > 0 THEN round(stats.shares[array_position(stats.elements, t.lexeme)] * stats.size) END,
        (SELECT count(*) FROM {table} c WHERE c.words @@ quote_literal(t.lexeme)::tsquery)
    )::bigint,
    greatest(stats.size::bigint, pg_stat_get_live_tuples(?::regclass), 0)
FROM unnest(to_tsvector('english', ?)) t CROSS JOIN stats"""

# Weight A marks the question's lexemes, so ts_filter keeps only them: their positions give their frequency
# without expanding every lexeme of every candidate. Candidates are scored on their tsvector alone and only the
# best `k` rows' text is read, found again by ctid (stable within the statement's snapshot).
_RANKED = """WITH candidates AS MATERIALIZED (
    SELECT c.ctid AS row_id, c.item_id, c.position, length(c.words) AS size,
        ts_filter(setweight(c.words, 'A', ?::text[]), '{{a}}') AS found
    FROM {table} c
    WHERE c.words @@ ?::tsquery{within}
        AND c.generation = (SELECT l.generation FROM rag_live l WHERE l.instance_uid = ? AND l.item_id = c.item_id)
    LIMIT ?
), best AS (
    SELECT c.row_id, s.score
    FROM (SELECT *, greatest(avg(size) OVER (), 1)::float8 AS average_size FROM candidates) c
    CROSS JOIN LATERAL (
        SELECT coalesce(sum(w.idf * f.tf * {k1_plus_1} / (f.tf + {k1} * (1 - {b} + {b} * c.size / c.average_size))),
            0) AS score
        FROM (SELECT u.lexeme, greatest(cardinality(u.positions), 1)::float8 AS tf FROM unnest(c.found) u) f
        JOIN unnest(?::text[], ?::float8[]) AS w(lexeme, idf) ON w.lexeme = f.lexeme
    ) s
    ORDER BY s.score DESC, c.item_id, c.position
    LIMIT ?
)
SELECT c.item_id, c.key, c.position, c.heading, c.text, best.score
FROM best JOIN {table} c ON c.ctid = best.row_id
ORDER BY best.score DESC, c.item_id, c.position"""


async def ranked_rows(
    fetch: Fetch, table: str, instance_uid: str, query: str, k: int, items: list[str] | None
) -> list[Row]:
    """The `k` best chunks as (item id, key, position, heading, text, BM25 score) rows, best first."""
    words = keyword_terms(query)
    if not words or k <= 0:
        return []
    counted = await fetch(_FREQUENCIES.format(table=table), (table, table, " ".join(words)))
    frequencies = {str(row[0]): int(row[1]) for row in counted}
    chosen = selective(frequencies, CANDIDATE_BUDGET)
    if not chosen:
        return []
    documents = max([int(counted[0][2]), *frequencies.values()])
    terms = list(frequencies)
    within = "" if items is None else " AND c.item_id = ANY(?::text[])"
    sql = _RANKED.format(
        table=table, within=within, k1=_real(BM25_K1), k1_plus_1=_real(BM25_K1 + 1), b=_real(BM25_B)
    )
    params: list[object] = [terms, _any_of(chosen)]
    params += [] if items is None else [items]
    params += [instance_uid, MAX_CANDIDATES, terms, idf_weights(terms, frequencies, documents), k]
    return await fetch(sql, params)


def _real(value: float) -> str:
    """A float8 literal: a bare `0.75` is numeric, whose arithmetic is several times slower."""
    return f"{value!r}::float8"


def _any_of(lexemes: Sequence[str]) -> str:
    """A tsquery matching any of the lexemes, each quoted: they come from PostgreSQL's own parser of `\\w+`
    words, so they hold no quote or backslash, but quoting keeps any other character a plain one."""
    return " | ".join("'" + lexeme.replace("'", "''") + "'" for lexeme in lexemes)
