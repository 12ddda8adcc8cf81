"""AI Search benchmark: retrieval quality, ingest throughput and query latency on real embeddings (issue 17).

Usage: .venv/bin/python -m bench.rag [--quick] [--sizes 10000 100000] [--queries 200] [--threads N]
                                     [--postgres DSN | --postgres start] [--wait-quiet SECONDS]

Corpus: the pydoc text of 119 standard library modules of this Python (bench/rag_corpus.py), one Markdown
document per module, chunked by Cirrus's `chunk_markdown` at an instance's defaults (256 tokens, 10% overlap) and
embedded by all-MiniLM-L6-v2 through the worker's own embeddings engine, in this process (bench/rag_minilm.py),
in batches of the ingest runner's size. Per back-end (SQLite; pgvector too with --postgres: a DSN whose
database has pgvector, or `start` for a throwaway server started as the tests start theirs):
- ingest: chunk + embed + write of the corpus, in chunks/s, each stage's share;
- quality: 149 labelled questions (bench/rag_questions.py) searched as the search route does (10 results), by
  vector, keyword and hybrid (RRF); recall@5 and MRR by module (rag_quality.py);
- latency: the index filled to each size with the corpus and filler chunks (the corpus's texts again, their
  MiniLM vectors perturbed by noise and renormalised), the database left to settle (autovacuum), then the
  questions asked again, timed over the whole query path (MiniLM embeds the question, the index searches, RRF
  fuses for hybrid), and again with the question's vector ready (the index alone).
--quick: 30 modules and their questions, 10k chunks only, 100 queries. Its quality figures have fewer
distractors, so they are not comparable with a full run's.
"""

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `python bench/rag.py` from the root

from bench.core import QUIET_CORES, busy_cpu_s, cpu_sample, others_cores, wait_for_quiet
from bench.rag_corpus import module_markdown
from bench.rag_index import CHUNKS_PER_ITEM, latencies, percentile
from bench.rag_minilm import MiniLM, minilm
from bench.rag_quality import Scores, agreement, answer_rank, document_key, module_of, scores
from bench.rag_questions import CORPUS_MODULES, QUESTIONS
from cirrus.db import Database, open_database
from cirrus.rag import ChunkIndex, ChunkText, open_index
from cirrus.rag.chunking import chunk_markdown
from cirrus.rag.documents import to_markdown
from cirrus.rag.ingest import IngestSettings
from cirrus.rag.instance_settings import DEFAULTS
from cirrus.rag.retrieval import EmbedQuery, Retrieval, RetrievalType, Scored, retrieve

RECALL_AT = 5
MAX_RESULTS = int(DEFAULTS["max_num_results"])  # what a search returns unless asked otherwise
CHUNK_TOKENS = min(int(DEFAULTS["chunk_size"]), IngestSettings().max_chunk_tokens)
CHUNK_OVERLAP = int(DEFAULTS["chunk_overlap"])
EMBED_BATCH = IngestSettings().embed_batch
FILLER_NOISE = 0.5  # the noise vector's expected length against a unit vector: cosine to the original ~0.9
P99_TARGET_MS = 50.0
QUICK_MODULES = 30
SETTLE_WINDOW_S = 3.0
SETTLE_MAX_S = 120.0
KINDS = tuple(RetrievalType)


@dataclass(frozen=True)
class Document:
    key: str
    chunks: list[ChunkText]
    vectors: list[list[float]]


@dataclass(frozen=True)
class Corpus:
    documents: list[Document]
    chunk_s: float
    embed_s: float

    @property
    def chunks(self) -> int:
        return sum(len(document.chunks) for document in self.documents)


@dataclass(frozen=True)
class Latency:
    chunks: int
    fill_rate: float  # filler chunks written per second to reach `chunks`
    settle_s: float  # waited after the fill for the database's background work (autovacuum) to end
    embed_ms: list[float]
    query_ms: dict[RetrievalType, list[float]]  # the whole path
    index_ms: dict[
        RetrievalType, list[float]
    ]  # the same with the query's vector ready: index and fusion only


@dataclass
class BackendRun:
    label: str
    write_s: float = 0.0
    ranks: dict[RetrievalType, list[int | None]] = field(default_factory=dict)
    latency: list[Latency] = field(default_factory=list)
    others_cores: dict[str, float] = field(default_factory=dict)


# -- corpus --------------------------------------------------------------------------------------------------


def build_corpus(modules: Sequence[str], model: MiniLM) -> Corpus:
    """Each module's document chunked then embedded, timed as the ingest runner's two stages (pydoc's own
    rendering, which stands for the upload, is not counted)."""
    markdown = {document_key(module): module_markdown(module).encode() for module in modules}
    started = time.perf_counter()
    chunked = {
        key: chunk_markdown(to_markdown(key, data), CHUNK_TOKENS, CHUNK_OVERLAP)
        for key, data in markdown.items()
    }
    chunk_s = time.perf_counter() - started
    started = time.perf_counter()
    documents = [Document(key, chunks, embedded(model, chunks)) for key, chunks in chunked.items()]
    return Corpus(documents, chunk_s, time.perf_counter() - started)


def embedded(model: MiniLM, chunks: Sequence[ChunkText]) -> list[list[float]]:
    vectors: list[list[float]] = []
    for start in range(0, len(chunks), EMBED_BATCH):
        vectors += model.embed([chunk.text for chunk in chunks[start : start + EMBED_BATCH]])
    return vectors


def query_embedder(model: MiniLM) -> EmbedQuery:
    """On a thread, as the server's embedding runs in a worker process: the event loop, and with it a hybrid
    search's keyword side, runs meanwhile (llama.cpp's calls release the GIL)."""

    async def embed(text: str) -> list[float]:
        return (await asyncio.to_thread(model.embed, [text]))[0]

    return embed


# -- one back-end ----------------------------------------------------------------------------------------------


async def write_corpus(index: ChunkIndex, uid: str, corpus: Corpus) -> float:
    started = time.perf_counter()
    for number, document in enumerate(corpus.documents):
        await index.replace_item(uid, f"doc{number}", document.key, document.chunks, document.vectors)
    return time.perf_counter() - started


async def answer_ranks(
    index: ChunkIndex, uid: str, embed: EmbedQuery, kind: RetrievalType, questions: Sequence[tuple[str, str]]
) -> list[int | None]:
    ranks = []
    for question, module in questions:
        found = await retrieve(index, uid, Retrieval(question, MAX_RESULTS, kind), embed)
        ranks.append(answer_rank([module_of(scored.hit.key) for scored in found], module))
    return ranks


async def fill_to(index: ChunkIndex, uid: str, corpus: Corpus, have: int, target: int, seed: int) -> float:
    """Filler items of CHUNKS_PER_ITEM chunks until the index holds `target`; returns chunks written per second."""
    rng = np.random.default_rng(seed)
    chunks = [chunk for document in corpus.documents for chunk in document.chunks]
    vectors = np.asarray([vector for document in corpus.documents for vector in document.vectors], np.float32)
    started = time.perf_counter()
    for first in range(have, target, CHUNKS_PER_ITEM):
        rows = np.arange(first, min(first + CHUNKS_PER_ITEM, target)) % len(chunks)
        texts = [ChunkText(n, chunks[row].text, chunks[row].heading) for n, row in enumerate(rows)]
        await index.replace_item(
            uid, f"filler{first}", f"filler/{first}.md", texts, perturbed(vectors[rows], rng)
        )
    return (target - have) / (time.perf_counter() - started) if target > have else 0.0


def perturbed(vectors: np.ndarray, rng: np.random.Generator) -> list[list[float]]:
    noise = rng.normal(scale=FILLER_NOISE / np.sqrt(vectors.shape[1]), size=vectors.shape)
    moved = vectors + noise
    unit: list[list[float]] = (moved / np.linalg.norm(moved, axis=1, keepdims=True)).tolist()
    return unit


async def query_latency(
    index: ChunkIndex, uid: str, embed: EmbedQuery, queries: Sequence[str], chunks: int, fill_rate: float
) -> Latency:
    settle_s = await asyncio.to_thread(settle)
    embed_ms = await latencies(lambda n: embed(queries[n]), len(queries))
    ready = {query: await embed(query) for query in set(queries)}

    async def embedded_already(query: str) -> list[float]:
        return ready[query]

    query_ms = {kind: await timed_retrievals(index, uid, embed, kind, queries) for kind in KINDS}
    index_ms = {kind: await timed_retrievals(index, uid, embedded_already, kind, queries) for kind in KINDS}
    return Latency(chunks, fill_rate, settle_s, embed_ms, query_ms, index_ms)


async def timed_retrievals(
    index: ChunkIndex, uid: str, embed: EmbedQuery, kind: RetrievalType, queries: Sequence[str]
) -> list[float]:
    async def search(n: int) -> list[Scored]:
        return await retrieve(index, uid, Retrieval(queries[n], MAX_RESULTS, kind), embed)

    await search(0)  # the first search loads SQLite's matrix
    return await latencies(search, len(queries))


def settle() -> float:
    """Waits (at most SETTLE_MAX_S) until nothing but this process keeps the machine busy: a database started
    here is a child, one given by DSN may be anywhere, and either may still be vacuuming after the fill."""
    started = time.monotonic()
    while time.monotonic() - started < SETTLE_MAX_S:
        before, own = busy_cpu_s(), time.process_time()
        time.sleep(SETTLE_WINDOW_S)
        if (busy_cpu_s() - before) - (time.process_time() - own) < QUIET_CORES * SETTLE_WINDOW_S:
            break
    return time.monotonic() - started


async def measure_backend(
    label: str, db: Database, corpus: Corpus, model: MiniLM, plan: "Plan"
) -> BackendRun:
    run = BackendRun(label)
    index = await open_index(db)
    uid = uuid.uuid4().hex
    embed = query_embedder(model)
    try:
        with phase(run, "write"):
            run.write_s = await write_corpus(index, uid, corpus)
        with phase(run, "quality"):
            for kind in KINDS:
                run.ranks[kind] = await answer_ranks(index, uid, embed, kind, plan.questions)
        have = corpus.chunks
        queries = [plan.questions[n % len(plan.questions)][0] for n in range(plan.queries)]
        for size in plan.sizes:
            with phase(run, f"fill {size}"):
                rate = await fill_to(index, uid, corpus, have, size, seed=size)
            have = max(have, size)
            with phase(run, f"latency {size}"):
                run.latency.append(await query_latency(index, uid, embed, queries, have, rate))
    finally:
        await index.drop_instance(uid)
    return run


@contextlib.contextmanager
def phase(run: BackendRun, name: str) -> Iterator[None]:
    """Times nothing itself: records the cores other processes kept busy while `name` ran."""
    start = cpu_sample()
    yield
    run.others_cores[name] = others_cores(start)
    progress(f"{run.label}: {name} done")


# -- databases ----------------------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def sqlite_database() -> AsyncIterator[Database]:
    with tempfile.TemporaryDirectory() as folder:
        db = await open_database(str(Path(folder) / "bench.db"))
        try:
            yield db
        finally:
            await db.close()


@contextlib.asynccontextmanager
async def postgres_database(dsn: str) -> AsyncIterator[Database]:
    """`dsn` as given, or with `start` a throwaway server and database, as the tests make them."""
    with contextlib.ExitStack() as stack:
        if dsn == "start":
            from tests.services.postgres import create_database, running_postgres

            dsn = create_database(stack.enter_context(running_postgres()), "rag_bench")
        db = await open_database(dsn)
        try:
            yield db
        finally:
            await db.close()


# -- the run -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    modules: tuple[str, ...]
    questions: tuple[tuple[str, str], ...]
    sizes: tuple[int, ...]
    queries: int
    threads: int
    postgres: str | None


def plan_of(args: argparse.Namespace) -> Plan:
    modules = CORPUS_MODULES
    sizes, queries = tuple(args.sizes), args.queries
    if args.quick:
        modules = tuple(dict.fromkeys(module for _, module in QUESTIONS))[:QUICK_MODULES]
        sizes, queries = (10_000,), min(queries, 100)
    questions = tuple(question for question in QUESTIONS if question[1] in modules)
    return Plan(modules, questions, sizes, queries, args.threads, args.postgres)


async def measure(plan: Plan) -> tuple[Corpus, list[BackendRun], float]:
    """The corpus, each back-end's run, and the cores other processes kept busy while embedding it."""
    with minilm(plan.threads) as model:
        start = cpu_sample()
        corpus = build_corpus(plan.modules, model)
        embed_busy = others_cores(start)
        progress(f"corpus: {corpus.chunks} chunks embedded in {corpus.embed_s:.0f} s")
        runs = []
        async with sqlite_database() as db:
            runs.append(await measure_backend("SQLite", db, corpus, model, plan))
        if plan.postgres:
            async with postgres_database(plan.postgres) as db:
                runs.append(await measure_backend("pgvector", db, corpus, model, plan))
    return corpus, runs, embed_busy


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- report ------------------------------------------------------------------------------------------------------


def commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=False).stdout.strip()

    dirty = (
        " (working tree with uncommitted changes)"
        if git("status", "--porcelain", "--untracked-files=no")
        else ""
    )
    return git("rev-parse", "--short", "HEAD") + dirty


def report(plan: Plan, corpus: Corpus, runs: list[BackendRun], embed_busy: float) -> list[str]:
    lines = [
        f"corpus: {len(corpus.documents)} modules' pydoc, {corpus.chunks} chunks ({CHUNK_TOKENS} tokens, "
        f"{CHUNK_OVERLAP}% overlap); {len(plan.questions)} questions; MiniLM on {plan.threads} threads",
        "",
        f"quality (recall@{RECALL_AT} and MRR@{MAX_RESULTS} by module)",
    ]
    for run in runs:
        lines += quality_lines(run)
    lines += ["", "ingest (chunk + embed + write)"]
    lines += [ingest_line(corpus, run) for run in runs]
    lines += [
        "",
        f"query latency, whole path (embed + search [+ fuse]), k={MAX_RESULTS}, {plan.queries} queries",
    ]
    for run in runs:
        for latency in run.latency:
            lines += latency_lines(run.label, latency)
    lines += ["", *target_lines(runs), "", busy_line(runs, embed_busy)]
    return lines


def quality_lines(run: BackendRun) -> list[str]:
    results = {kind: scores(ranks, RECALL_AT) for kind, ranks in run.ranks.items()}
    lines = [f"  {run.label:<9} {kind.value:<8} {score_text(results[kind])}" for kind in KINDS]
    ranks = run.ranks
    split = agreement(
        ranks[RetrievalType.VECTOR], ranks[RetrievalType.KEYWORD], ranks[RetrievalType.HYBRID], RECALL_AT
    )
    lines.append(
        f"  {run.label:<9} within {RECALL_AT}: both {split.both} (hybrid keeps {split.hybrid_in_both}), vector only "
        f"{split.vector_only} (hybrid keeps {split.hybrid_in_vector_only}), keyword only {split.keyword_only} "
        f"(hybrid keeps {split.hybrid_in_keyword_only}), neither {split.neither} "
        f"(hybrid finds {split.hybrid_in_neither})"
    )
    return lines


def score_text(score: Scores) -> str:
    return f"recall@{score.k} {score.recall:.3f}  MRR {score.mrr:.3f}"


def ingest_line(corpus: Corpus, run: BackendRun) -> str:
    total = corpus.chunk_s + corpus.embed_s + run.write_s
    return (
        f"  {run.label:<9} {corpus.chunks / total:6.1f} chunks/s: chunk {corpus.chunk_s:.1f} s "
        f"({corpus.chunk_s / total:.0%}), embed {corpus.embed_s:.1f} s ({corpus.embed_s / total:.0%}), "
        f"write {run.write_s:.1f} s ({run.write_s / total:.0%})"
    )


def latency_lines(label: str, latency: Latency) -> list[str]:
    def kinds(samples: dict[RetrievalType, list[float]]) -> str:
        return "  ".join(f"{kind.value} {ms_text(samples[kind])}" for kind in KINDS)

    return [
        f"  {label:<9} {latency.chunks:>7} chunks  whole path   {kinds(latency.query_ms)}",
        f"  {'':<9} {'':>7}         index alone  {kinds(latency.index_ms)}",
        f"  {'':<9} {'':>7}         embed alone {ms_text(latency.embed_ms)}; filled at {latency.fill_rate:.0f} "
        f"chunks/s, then {latency.settle_s:.0f} s for the database to settle",
    ]


def ms_text(samples: list[float]) -> str:
    return f"p50 {percentile(samples, 0.5):5.1f} p99 {percentile(samples, 0.99):5.1f} ms"


def target_lines(runs: list[BackendRun]) -> list[str]:
    lines = []
    for run in runs:
        recall = {kind: scores(ranks, RECALL_AT).recall for kind, ranks in run.ranks.items()}
        above = recall[RetrievalType.HYBRID] > max(
            recall[RetrievalType.VECTOR], recall[RetrievalType.KEYWORD]
        )
        lines.append(f"{run.label}: hybrid recall@{RECALL_AT} above both alone: {verdict(above)}")
        largest = max(run.latency, key=lambda latency: latency.chunks, default=None)
        if largest is not None:
            for kind in KINDS:
                p99 = percentile(largest.query_ms[kind], 0.99)
                lines.append(
                    f"{run.label}: {kind.value} p99 under {P99_TARGET_MS:.0f} ms at {largest.chunks} chunks, whole "
                    f"path: {p99:.1f} ms {verdict(p99 < P99_TARGET_MS)}"
                )
    return lines


def verdict(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


def busy_line(runs: list[BackendRun], embed_busy: float) -> str:
    phases = [f"embed corpus {embed_busy:.2f}"]
    for run in runs:
        phases += [f"{run.label} {name} {cores:.2f}" for name, cores in run.others_cores.items()]
    return f"cores kept busy by other processes during each phase (of {os.cpu_count()}): {', '.join(phases)}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--postgres", metavar="DSN", help="a DSN whose database has pgvector, or 'start'")
    parser.add_argument("--wait-quiet", type=float, default=60.0, metavar="SECONDS")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = plan_of(args)
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; commit {commit()}")
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"quiet: {wait_for_quiet(args.wait_quiet)}", flush=True)
    corpus, runs, embed_busy = asyncio.run(measure(plan))
    print("\n".join(report(plan, corpus, runs, embed_busy)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
