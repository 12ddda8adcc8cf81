"""`cirrus eval quality`: how far each candidate's predictions stray from a reference's, and what each costs.

Each model runs in its own probe process, twice for generation models: once to time loading and generating
(and read the peak memory of that), once to score the corpus with every position's logits. The reference
writes its log-probabilities to a file; each candidate reads them back and compares position by position.
"""

import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cirrus.evals.corpus import Corpus, sentences
from cirrus.evals.errors import EvalError
from cirrus.evals.machine import machine_summary, utc_now
from cirrus.evals.models import ModelFile, inspect_model
from cirrus.evals.runner import run_probe
from cirrus.evals.stats import cosine, percentile, perplexity

DECODE_TOKENS = 64
EMBEDDING_SENTENCES = 64


@dataclass(frozen=True)
class QualitySettings:
    tokens: int = 4096
    n_ctx: int = 512
    threads: int = 2
    decode_tokens: int = DECODE_TOKENS
    speed_runs: int = 3


@dataclass
class ModelQuality:
    model: str
    role: str
    architecture: str
    quantization: str
    size_bytes: int
    load_s: float
    peak_rss_bytes: int
    prompt_tps: float
    decode_tps: float | None = None
    perplexity: float | None = None
    kl_mean: float | None = None
    kl_p99: float | None = None
    kl_max: float | None = None
    top1_agreement: float | None = None
    cosine_mean: float | None = None
    cosine_min: float | None = None


@dataclass
class QualityReport:
    corpus: dict[str, Any]
    settings: dict[str, Any]
    machine: dict[str, Any]
    date: str
    kind: str
    models: list[ModelQuality] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


Progress = Callable[[str], None]


def _stderr(message: str) -> None:
    print(f"cirrus eval: {message}", file=sys.stderr, flush=True)


def _files(reference: Path, candidates: list[Path]) -> list[ModelFile]:
    files = [inspect_model(path) for path in (reference, *candidates)]
    kinds = {f.is_embedding for f in files}
    if len(kinds) > 1:
        raise EvalError("the reference and candidates mix embedding and text-generation models")
    return files


def _base(file: ModelFile, role: str, speed: dict[str, Any]) -> ModelQuality:
    return ModelQuality(
        model=str(file.path),
        role=role,
        architecture=file.architecture,
        quantization=file.quantization,
        size_bytes=file.size_bytes,
        load_s=speed["load_s"],
        peak_rss_bytes=speed["peak_rss_bytes"],
        prompt_tps=speed["prompt_tps"],
        decode_tps=speed.get("decode_tps"),
    )


def _generation(
    files: list[ModelFile], corpus: Corpus, settings: QualitySettings, workdir: Path, progress: Progress
) -> list[ModelQuality]:
    common = {"text": corpus.text, "n_ctx": settings.n_ctx, "threads": settings.threads}
    common |= {
        "tokens": settings.tokens,
        "decode_tokens": settings.decode_tokens,
        "runs": settings.speed_runs,
    }
    common["logprobs_file"] = str(workdir / "reference.f32")
    results: list[ModelQuality] = []
    reference: dict[str, Any] = {}
    for index, file in enumerate(files):
        role = "reference" if index == 0 else "candidate"
        progress(f"{file.path.name}: timing load and generation")
        speed = run_probe({**common, "task": "speed", "model": str(file.path)})
        progress(f"{file.path.name}: scoring {settings.tokens} corpus tokens")
        extra = (
            {} if index == 0 else {"expected_tokens": reference["tokens"], "n_vocab": reference["n_vocab"]}
        )
        scores = run_probe({**common, **extra, "task": role, "model": str(file.path)})
        reference = reference or scores
        results.append(_scored(_base(file, role, speed), scores, reference))
    return results


def _scored(row: ModelQuality, scores: dict[str, Any], reference: dict[str, Any]) -> ModelQuality:
    row.perplexity = perplexity(scores["target_logprobs"])
    kl = scores.get("kl", [0.0] * len(scores["target_logprobs"]))
    row.kl_mean, row.kl_p99, row.kl_max = statistics.fmean(kl), percentile(kl, 99), max(kl)
    row.top1_agreement = float(np.mean(np.asarray(scores["top1"]) == np.asarray(reference["top1"])))
    return row


def _embedding(
    files: list[ModelFile], corpus: Corpus, settings: QualitySettings, workdir: Path, progress: Progress
) -> list[ModelQuality]:
    texts = sentences(corpus.text, EMBEDDING_SENTENCES)
    if not texts:
        raise EvalError("the corpus has no sentences of 5 to 60 words to embed")
    results: list[ModelQuality] = []
    reference_vectors: np.ndarray | None = None
    for index, file in enumerate(files):
        progress(f"{file.path.name}: embedding {len(texts)} sentences")
        out = workdir / f"embeddings-{index}.npy"
        request = {"task": "embeddings", "model": str(file.path), "sentences": texts, "n_ctx": settings.n_ctx}
        speed = run_probe({**request, "threads": settings.threads, "embeddings_file": str(out)})
        vectors = np.load(out)
        reference_vectors = vectors if reference_vectors is None else reference_vectors
        row = _base(file, "reference" if index == 0 else "candidate", speed)
        similarity = cosine(vectors, reference_vectors)
        row.cosine_mean, row.cosine_min = float(similarity.mean()), float(similarity.min())
        results.append(row)
    return results


def evaluate_quality(
    reference: Path,
    candidates: list[Path],
    corpus: Corpus,
    settings: QualitySettings,
    progress: Progress = _stderr,
) -> QualityReport:
    if settings.tokens < 2 or settings.n_ctx < 8:
        raise EvalError("--tokens must be at least 2 and --ctx at least 8")
    files = _files(reference, candidates)
    embedding = files[0].is_embedding
    report = QualityReport(
        corpus={"source": corpus.source, "sha256": corpus.sha256, "characters": len(corpus.text)},
        settings=asdict(settings),
        machine=machine_summary(),
        date=utc_now(),
        kind="text-embeddings" if embedding else "text-generation",
    )
    with tempfile.TemporaryDirectory(prefix="cirrus-eval-") as workdir:
        measure = _embedding if embedding else _generation
        report.models = measure(files, corpus, settings, Path(workdir), progress)
    return report


MANIFEST_SKIPS = frozenset({"model", "role", "architecture", "quantization", "size_bytes"})


def evaluation_summary(report: QualityReport, row: ModelQuality, reference: str) -> dict[str, Any]:
    """What a packed variant's manifest keeps of one candidate's row (the manifest already says the rest)."""
    measured = {k: v for k, v in asdict(row).items() if k not in MANIFEST_SKIPS and v is not None}
    context = {"corpus": report.corpus, "settings": report.settings, "machine": report.machine}
    return {"tool": "cirrus eval quality", "date": report.date, "reference": reference, **measured, **context}
