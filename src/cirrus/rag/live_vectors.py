"""An instance's visible vectors in memory for exact cosine search, and a byte-bounded cache of them.

Reading 100k vectors from SQLite takes far longer than searching them, so a search reads only the instance's
version number and reuses these while it is current; a change reloads only the items whose generation moved.
Stacking 100k vectors into one matrix again costs about a second here (fresh memory is slow to fault in), so
a change does not: the stacked `base` stays, its rows of changed or deleted items masked out, and the changed
items are stacked apart (`delta`). The base is stacked anew once the delta and the masked rows together pass a
fifth of it.

Exact search reads every row: on one thread about 18 ms at 100k rows of 384 dimensions, mostly memory traffic. So
a base of IVF_MIN_ROWS rows or more gets an inverted-file index (ivf.py) when it is stacked, and a search scores
only the rows of the lists nearest the query; a smaller base, and the delta always, are searched exactly.
"""

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from cirrus.rag.blas import one_blas_thread
from cirrus.rag.ivf import InvertedLists

FloatMatrix = npt.NDArray[np.float32]
Ids = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]
Found = list[tuple[int, str, float]]  # (chunk id, item id, cosine)
VECTOR_DTYPE = np.dtype("<f4")  # how a vector is stored: little-endian float32
RESTACK_SHARE = 0.2
RESTACK_MIN_ROWS = 2000
IVF_MIN_ROWS = 50_000  # where exact search alone passes ~10 ms p99 on one thread (bench/RESULTS.md, issue 17)


@dataclass(frozen=True)
class ItemVectors:
    generation: int
    key: str
    ids: Ids  # chunk row ids
    vectors: FloatMatrix  # one unit-length row per chunk


def unit_rows(matrix: FloatMatrix) -> FloatMatrix:
    """Rows scaled to length 1 (a zero row stays zero: it matches nothing)."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.where(norms == 0, 1, norms)).astype(np.float32)


class _Block:
    """Items' vectors stacked in one matrix: row r is a chunk of item `item_ids[owners[r]]`. With `indexed`, a
    matrix of IVF_MIN_ROWS rows or more gets inverted lists, and a search scores only the rows they offer."""

    def __init__(self, items: Mapping[str, ItemVectors], dimension: int, indexed: bool = False) -> None:
        self.item_ids = list(items)
        self.generations = [vectors.generation for vectors in items.values()]
        counts = [len(vectors.ids) for vectors in items.values()]
        self.owners = np.repeat(np.arange(len(counts)), counts)
        self.ids = np.concatenate([v.ids for v in items.values()]) if items else np.zeros(0, np.int64)
        self.matrix = (
            np.concatenate([v.vectors for v in items.values()])
            if items
            else np.zeros((0, dimension), np.float32)
        )
        self.lists = InvertedLists.train(self.matrix) if indexed and len(self.ids) >= IVF_MIN_ROWS else None

    @property
    def nbytes(self) -> int:
        lists = 0 if self.lists is None else self.lists.nbytes
        return int(self.matrix.nbytes + self.ids.nbytes + self.owners.nbytes + lists)

    def top(self, query: FloatMatrix, k: int, items_allowed: Mask) -> Found:
        """The `k` best rows of the allowed items, best first (approximately, where the block has lists)."""
        rows_allowed = items_allowed[self.owners]
        allowed_count = int(rows_allowed.sum())
        k = min(k, allowed_count)
        if k <= 0:
            return []
        if self.lists is None:
            rows = np.arange(len(self.ids))
            scores = np.where(rows_allowed, self.matrix @ query, -np.inf)
        else:
            rows = self.lists.candidates(query, k, rows_allowed, allowed_count)
            scores = self.matrix[rows] @ query
        best = np.argpartition(-scores, k - 1)[:k]
        best = best[np.argsort(-scores[best], kind="stable")]
        return [
            (int(self.ids[row]), self.item_ids[int(self.owners[row])], float(score))
            for row, score in zip(rows[best], scores[best], strict=True)
        ]


def _within(item_ids: list[str], items: frozenset[str] | None) -> Mask:
    if items is None:
        return np.ones(len(item_ids), dtype=bool)
    return np.fromiter((item_id in items for item_id in item_ids), dtype=bool, count=len(item_ids))


class InstanceVectors:
    """One instance's searchable vectors at one version of its index. Never changed once built, so a search may
    run in a thread while a newer one is built."""

    def __init__(
        self, version: int, dimension: int, items: Mapping[str, ItemVectors], base: _Block | None = None
    ) -> None:
        self.version = version
        self.dimension = dimension
        self.items = dict(items)
        in_base = {} if base is None else dict(zip(base.item_ids, base.generations, strict=True))
        fresh = {item_id: v for item_id, v in self.items.items() if in_base.get(item_id) != v.generation}
        one_blas_thread()
        if base is None or _worth_restacking(base, self.items, fresh):
            base, fresh = _Block(self.items, dimension, indexed=True), {}
        self._base = base
        self._base_current = np.array(
            [
                self.generation(item_id) == generation
                for item_id, generation in zip(base.item_ids, base.generations, strict=True)
            ],
            dtype=bool,
        )
        self._delta = _Block(fresh, dimension)

    def updated(self, version: int, items: Mapping[str, ItemVectors]) -> "InstanceVectors":
        """These items at `version`, reusing this one's stacked base."""
        return InstanceVectors(version, self.dimension, items, self._base)

    @property
    def nbytes(self) -> int:
        return self._base.nbytes + self._delta.nbytes

    def generation(self, item_id: str) -> int | None:
        found = self.items.get(item_id)
        return None if found is None else found.generation

    def search(self, query: FloatMatrix, k: int, items: frozenset[str] | None) -> Found:
        """(chunk id, item id, cosine) of the `k` best chunks of `items` (None: all), best first; `query` has
        unit length."""
        base = self._base.top(query, k, self._base_current & _within(self._base.item_ids, items))
        delta = self._delta.top(query, k, _within(self._delta.item_ids, items))
        return sorted(base + delta, key=lambda found: -found[2])[:k]


def _worth_restacking(
    base: _Block, items: Mapping[str, ItemVectors], fresh: Mapping[str, ItemVectors]
) -> bool:
    """Whether the rows a new version would keep apart or mask in `base` pass a fifth of it."""
    apart = sum(len(vectors.ids) for vectors in fresh.values())
    kept = sum(len(vectors.ids) for item_id, vectors in items.items() if item_id not in fresh)
    masked = len(base.ids) - kept
    return apart + masked > max(RESTACK_MIN_ROWS, RESTACK_SHARE * len(base.ids))


class VectorCache:
    """Instances' vectors, the least recently used dropped past `max_bytes` (the last one put always stays)."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._entries: OrderedDict[str, InstanceVectors] = OrderedDict()

    def get(self, instance_uid: str) -> InstanceVectors | None:
        found = self._entries.get(instance_uid)
        if found is not None:
            self._entries.move_to_end(instance_uid)
        return found

    def put(self, instance_uid: str, vectors: InstanceVectors) -> None:
        self._entries[instance_uid] = vectors
        self._entries.move_to_end(instance_uid)
        while len(self._entries) > 1 and self._total() > self._max_bytes:
            self._entries.popitem(last=False)

    def drop(self, instance_uid: str) -> None:
        self._entries.pop(instance_uid, None)

    def _total(self) -> int:
        return sum(entry.nbytes for entry in self._entries.values())
