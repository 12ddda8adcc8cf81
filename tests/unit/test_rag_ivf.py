"""SQLite's vector search past IVF_MIN_ROWS: an inverted-file index over the stacked base (ivf.py), exact below
it and for the delta, filters kept, trained again when the base is stacked anew; and one BLAS thread."""

from typing import Any

import numpy as np
import pytest
from threadpoolctl import threadpool_info  # type: ignore[import-untyped]

from cirrus.rag import ivf, live_vectors
from cirrus.rag.ivf import InvertedLists
from cirrus.rag.live_vectors import Found, InstanceVectors, ItemVectors, unit_rows

DIMENSION = 16
CLUSTERS = 40
ITEMS = 80
ROWS_PER_ITEM = 25  # 2,000 rows: 45 lists
INDEXED_FROM = 500
K = 10


class Corpus:
    """Items whose rows lie close around one of CLUSTERS random directions, a tenth of them under b/."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.centers = self.directions(CLUSTERS)
        self.next_id = 0

    def directions(self, count: int) -> np.ndarray:
        return unit_rows(self.rng.normal(size=(count, DIMENSION)).astype(np.float32))

    def item(self, generation: int, center: np.ndarray, key: str) -> ItemVectors:
        noise = self.rng.normal(scale=0.05, size=(ROWS_PER_ITEM, DIMENSION))
        ids = np.arange(self.next_id, self.next_id + ROWS_PER_ITEM, dtype=np.int64)
        self.next_id += ROWS_PER_ITEM
        return ItemVectors(generation, key, ids, unit_rows((center + noise).astype(np.float32)))

    def items(self) -> dict[str, ItemVectors]:
        return {
            f"i{n}": self.item(0, self.centers[n % CLUSTERS], f"{'b' if n % 10 == 0 else 'a'}/{n}.md")
            for n in range(ITEMS)
        }

    def near(self, center: np.ndarray) -> np.ndarray:
        moved = (center + self.rng.normal(scale=0.02, size=DIMENSION)).astype(np.float32)
        query: np.ndarray = unit_rows(moved[None])[0]
        return query


@pytest.fixture(autouse=True)
def small_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lists from INDEXED_FROM rows, 4 probed of 45: a search scores about a tenth of the rows."""
    monkeypatch.setattr(live_vectors, "IVF_MIN_ROWS", INDEXED_FROM)
    monkeypatch.setattr(ivf, "PROBES", 4)


def exact(version: int, items: dict[str, ItemVectors], monkeypatch: pytest.MonkeyPatch) -> InstanceVectors:
    with monkeypatch.context() as patched:
        patched.setattr(live_vectors, "IVF_MIN_ROWS", 10**9)
        return InstanceVectors(version, DIMENSION, items)


def scored_rows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many rows each search through lists scores from now on, filled as searches run."""
    counts: list[int] = []
    candidates = InvertedLists.candidates

    def counted(lists: InvertedLists, *args: Any) -> np.ndarray:
        rows = candidates(lists, *args)
        counts.append(len(rows))
        return rows

    monkeypatch.setattr(InvertedLists, "candidates", counted)
    return counts


def same(found: Found, expected: Found) -> bool:
    return [f[:2] for f in found] == [e[:2] for e in expected] and np.allclose(
        [f[2] for f in found], [e[2] for e in expected], atol=1e-6
    )


def test_a_base_below_the_threshold_is_searched_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    items = Corpus(1).items()
    assert InstanceVectors(0, DIMENSION, items)._base.lists is not None
    monkeypatch.setattr(live_vectors, "IVF_MIN_ROWS", ITEMS * ROWS_PER_ITEM + 1)
    assert InstanceVectors(0, DIMENSION, items)._base.lists is None


def test_lists_hold_every_row_once_under_unit_centroids() -> None:
    matrix = unit_rows(np.random.default_rng(2).normal(size=(3000, DIMENSION)).astype(np.float32))
    lists = InvertedLists.train(matrix)
    assert len(lists.centroids) == ivf.list_count(3000) == 55
    assert sorted(lists.rows.tolist()) == list(range(3000))
    assert lists.starts[0] == 0 and lists.starts[-1] == 3000 and np.all(np.diff(lists.starts) >= 0)
    assert np.allclose(np.linalg.norm(lists.centroids, axis=1), 1, atol=1e-5)


def test_lists_find_the_true_top_k_scoring_a_fraction_of_the_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = Corpus(3)
    items = corpus.items()
    indexed, expected = InstanceVectors(0, DIMENSION, items), exact(0, items, monkeypatch)
    scored = scored_rows(monkeypatch)
    for center in corpus.centers:
        query = corpus.near(center)
        assert same(indexed.search(query, K, None), expected.search(query, K, None))
    assert len(scored) == CLUSTERS and max(scored) < ITEMS * ROWS_PER_ITEM / 4


def test_filters_hold_through_the_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder (a/: 90% of rows, through the lists; b/: 10%, exact over its rows) and items changed since the
    base was stacked (their base rows masked, their new rows in the delta)."""
    corpus = Corpus(4)
    items = corpus.items()
    indexed = InstanceVectors(0, DIMENSION, items)
    moved = corpus.directions(1)[0]
    changed = {"i1": corpus.item(1, moved, "a/1.md"), "i10": corpus.item(1, moved, "b/10.md")}
    items.update(changed)
    del items["i2"]
    indexed = indexed.updated(1, items)
    assert indexed._base.lists is not None and len(indexed._delta.ids) == 2 * ROWS_PER_ITEM  # not restacked
    expected = exact(1, items, monkeypatch)
    for query in [corpus.near(moved), *(corpus.near(center) for center in corpus.centers[:4])]:
        for prefix in (None, "a/", "b/"):
            folder = (
                None if prefix is None else frozenset(i for i, v in items.items() if v.key.startswith(prefix))
            )
            found = indexed.search(query, K, folder)
            assert same(found, expected.search(query, K, folder))
            assert all(items[item_id].key.startswith(prefix or "") for _, item_id, _ in found)
            live_ids = {int(i) for vectors in items.values() for i in vectors.ids}
            assert {chunk_id for chunk_id, _, _ in found} <= live_ids


def test_probing_widens_until_k_allowed_rows_are_found() -> None:
    matrix = unit_rows(np.random.default_rng(5).normal(size=(2000, DIMENSION)).astype(np.float32))
    lists = InvertedLists.train(matrix)
    allowed = np.zeros(2000, dtype=bool)
    allowed[::3] = True  # a third allowed: the share left to lists, not exact
    query = matrix[0]
    nearest_list = int(np.argmax(lists.centroids @ query))
    allowed[lists.rows[lists.starts[nearest_list] : lists.starts[nearest_list + 1]]] = False
    rows = lists.candidates(query, 200, allowed, int(allowed.sum()))
    assert len(rows) >= 200 and allowed[rows].all()


def test_stacking_anew_trains_new_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live_vectors, "RESTACK_MIN_ROWS", 50)
    corpus = Corpus(6)
    items = corpus.items()
    indexed = InstanceVectors(0, DIMENSION, items)
    first_lists = indexed._base.lists
    elsewhere = corpus.directions(ITEMS // 2)
    for n, center in enumerate(elsewhere):  # half the rows move, each item to its own place: past the share
        items[f"i{n}"] = corpus.item(1, center, f"a/{n}.md")
    indexed = indexed.updated(1, items)
    lists = indexed._base.lists
    assert lists is not None and lists is not first_lists and len(indexed._delta.ids) == 0
    assert sorted(lists.rows.tolist()) == list(range(ITEMS * ROWS_PER_ITEM))
    expected = exact(1, items, monkeypatch)
    for center in elsewhere:
        query = corpus.near(center)
        assert same(indexed.search(query, K, None), expected.search(query, K, None))


def test_stacking_vectors_leaves_blas_one_thread() -> None:
    InstanceVectors(0, DIMENSION, Corpus(7).items())
    blas = [library for library in threadpool_info() if library["user_api"] == "blas"]
    assert blas and all(library["num_threads"] == 1 for library in blas)
