"""Chunk index benchmark: how fast AI Search's index writes and answers at 10k and 100k chunks (issue 17).

Usage: .venv/bin/python -m bench.rag_index [--sizes 10000 100000] [--dimension 384] [--queries 200]
                                           [--postgres DSN]

Per size, a fresh index is filled with items of 50 chunks (random unit vectors, text of random words), then
measured: write throughput (chunks/s), the first search (which loads SQLite's in-memory matrix), nearest-neighbour
latency p50 / p99 (k=10, and k=10 within a folder holding a tenth of the items), keyword (BM25) latency, and the
first search after one item was replaced (the matrix reloads that item only). SQLite always; pgvector (HNSW) too
when --postgres names a database that has the extension (the benchmark creates and drops its own tables there).
"""

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `python bench/rag_index.py` from the root

from cirrus.db import Database, open_database
from cirrus.rag import ChunkIndex, ChunkText, open_index

CHUNKS_PER_ITEM = 50
WORDS_PER_CHUNK = 120
VOCABULARY = 5000
FOLDERS = 10
K = 10


def percentile(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def random_texts(rng: np.random.Generator, count: int) -> list[str]:
    # Zipf-like word frequencies, as in prose: a few words everywhere, most rare.
    ranks = np.minimum(rng.zipf(1.3, size=(count, WORDS_PER_CHUNK)), VOCABULARY)
    return [" ".join(f"w{rank}" for rank in row) for row in ranks]


async def fill(index: ChunkIndex, uid: str, size: int, dimension: int, rng: np.random.Generator) -> float:
    """Writes `size` chunks; returns chunks per second."""
    started = time.perf_counter()
    for item in range(size // CHUNKS_PER_ITEM):
        vectors = rng.normal(size=(CHUNKS_PER_ITEM, dimension)).astype(np.float32)
        texts = random_texts(rng, CHUNKS_PER_ITEM)
        chunks = [ChunkText(n, text, "") for n, text in enumerate(texts)]
        key = f"folder{item % FOLDERS}/doc{item}.md"
        await index.replace_item(uid, f"item{item}", key, chunks, vectors.tolist())
    return size / (time.perf_counter() - started)


async def latencies(search: Callable[[int], Awaitable[Any]], count: int) -> list[float]:
    samples = []
    for n in range(count):
        started = time.perf_counter()
        await search(n)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def summary(name: str, samples: list[float]) -> str:
    return f"{name}: p50 {statistics.median(samples):.1f} ms, p99 {percentile(samples, 0.99):.1f} ms"


async def measure(label: str, db: Database, size: int, dimension: int, queries: int) -> None:
    rng = np.random.default_rng(size)
    index = await open_index(db)
    uid = uuid.uuid4().hex
    try:
        rate = await fill(index, uid, size, dimension, rng)
        probes = rng.normal(size=(queries, dimension)).astype(np.float32).tolist()
        # a question's content words: neither the commonest (function words, which search drops) nor unseen
        words = [" ".join(f"w{rank}" for rank in rng.integers(20, 2000, size=3)) for _ in range(queries)]
        started = time.perf_counter()
        await index.nearest(uid, probes[0], K)
        first_ms = (time.perf_counter() - started) * 1000
        nearest = await latencies(lambda n: index.nearest(uid, probes[n], K), queries)
        in_folder = frozenset(f"item{item}" for item in range(size // CHUNKS_PER_ITEM) if item % FOLDERS == 3)
        folder = await latencies(lambda n: index.nearest(uid, probes[n], K, items=in_folder), queries)
        keyword = await latencies(lambda n: index.keyword(uid, words[n], K), queries)
        await fill(index, uid, CHUNKS_PER_ITEM, dimension, rng)  # rewrites item0
        started = time.perf_counter()
        await index.nearest(uid, probes[0], K)
        after_write_ms = (time.perf_counter() - started) * 1000
        print(f"{label}, {size} chunks of {dimension} dimensions:")
        print(
            f"  write: {rate:.0f} chunks/s; first search {first_ms:.0f} ms; after one item's rewrite {after_write_ms:.1f} ms"
        )
        print(f"  {summary('nearest k=10', nearest)}")
        print(f"  {summary('nearest k=10 in one folder', folder)}")
        print(f"  {summary('keyword k=10', keyword)}")
    finally:
        await index.drop_instance(uid)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--postgres", help="a PostgreSQL DSN whose database has pgvector")
    args = parser.parse_args()
    for size in args.sizes:
        with tempfile.TemporaryDirectory() as folder:
            db = await open_database(str(Path(folder) / "bench.db"))
            try:
                await measure("SQLite (exact, numpy)", db, size, args.dimension, args.queries)
            finally:
                await db.close()
        if args.postgres:
            db = await open_database(args.postgres)
            try:
                await measure("PostgreSQL (pgvector HNSW)", db, size, args.dimension, args.queries)
            finally:
                await db.close()


if __name__ == "__main__":
    asyncio.run(main())
