"""An inverted-file index (IVF) over a stacked matrix of unit rows: which rows a search scores when there are many.

k-means centroids split the rows into about sqrt(N) lists, each row in the list of its nearest centroid. A search
scores the centroids, takes the rows of the `PROBES` nearest lists and leaves the rest unscored; the caller scores
the rows taken exactly. Rows are unit length, so nearness is the dot product throughout (spherical k-means).

Training runs on a sample for a few iterations, then assigns every row in one product: about 0.7 s at 100k
rows of 384 dimensions on one thread, paid when a base matrix is stacked anew (rare: live_vectors.py).
"""

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatMatrix = npt.NDArray[np.float32]
FloatVector = npt.NDArray[np.float32]
Ids = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

PROBES = 16  # lists searched when every row is allowed: recall@10 >= 0.95 (bench/RESULTS.md, issue 17)
TRAIN_ROWS = 16_384  # the sample k-means learns from
TRAIN_ITERATIONS = 6
ASSIGN_ROWS = 16_384  # rows assigned per product, to bound the scores matrix's memory
SEED = 0  # a fixed seed: the same rows give the same lists


def list_count(rows: int) -> int:
    return max(1, round(math.sqrt(rows)))


@dataclass(frozen=True)
class InvertedLists:
    centroids: FloatMatrix  # one unit row per list
    rows: Ids  # the matrix's rows, list by list
    starts: Ids  # list l holds rows[starts[l] : starts[l + 1]]

    @classmethod
    def train(cls, matrix: FloatMatrix) -> "InvertedLists":
        rng = np.random.default_rng(SEED)
        sample = matrix[np.sort(rng.choice(len(matrix), min(len(matrix), TRAIN_ROWS), replace=False))]
        centroids = _kmeans(sample, list_count(len(matrix)), rng)
        nearest = _nearest_centroids(matrix, centroids)
        counts = np.bincount(nearest, minlength=len(centroids))
        starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return cls(centroids, np.argsort(nearest, kind="stable").astype(np.int64), starts)

    @property
    def nbytes(self) -> int:
        return int(self.centroids.nbytes + self.rows.nbytes + self.starts.nbytes)

    def candidates(self, query: FloatVector, k: int, allowed: Mask, allowed_count: int) -> Ids:
        """Allowed rows to score, at least `k` of them unless fewer are allowed. When a filter leaves a share of
        the rows, that many more lists are probed, so about as many allowed rows are found; when probing would
        score more rows than the filter leaves, the allowed rows themselves are the candidates (exact)."""
        lists, total = len(self.centroids), len(self.rows)
        probes = min(lists, math.ceil(PROBES * total / max(allowed_count, 1)))
        if allowed_count <= probes * total / lists:
            return np.flatnonzero(allowed)
        order = np.argsort(-(self.centroids @ query))
        while True:
            probed: Ids = np.concatenate([self._list(int(n)) for n in order[:probes]])
            found: Ids = probed[allowed[probed]]
            if len(found) >= k or probes >= lists:
                return found
            probes = min(lists, 2 * probes)

    def _list(self, number: int) -> Ids:
        return self.rows[self.starts[number] : self.starts[number + 1]]


def _kmeans(sample: FloatMatrix, lists: int, rng: np.random.Generator) -> FloatMatrix:
    """Spherical k-means from `lists` distinct sample rows; a list left empty restarts at a random row."""
    centroids = sample[rng.choice(len(sample), min(lists, len(sample)), replace=False)]
    for _ in range(TRAIN_ITERATIONS):
        nearest = _nearest_centroids(sample, centroids)
        counts = np.bincount(nearest, minlength=len(centroids))
        filled = np.flatnonzero(counts)
        firsts = np.concatenate([[0], np.cumsum(counts)[:-1]])[filled]
        sums = np.add.reduceat(sample[np.argsort(nearest, kind="stable")], firsts, axis=0)
        centroids = centroids.copy()
        centroids[filled] = _unit(sums)
        empty = np.flatnonzero(counts == 0)
        centroids[empty] = sample[rng.choice(len(sample), len(empty), replace=False)]
    return centroids


def _nearest_centroids(matrix: FloatMatrix, centroids: FloatMatrix) -> npt.NDArray[np.intp]:
    parts = [
        np.argmax(matrix[start : start + ASSIGN_ROWS] @ centroids.T, axis=1)
        for start in range(0, len(matrix), ASSIGN_ROWS)
    ]
    return np.concatenate(parts) if parts else np.zeros(0, np.intp)


def _unit(rows: FloatMatrix) -> FloatMatrix:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return (rows / np.where(norms == 0, 1, norms)).astype(np.float32)
