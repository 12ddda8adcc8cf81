"""`cirrus eval context`: time to first token, decode rate and peak memory as the prompt grows.

Each length runs in a fresh probe process sized to it (n_ctx = the length), so its peak memory is what a server
instance with that window would hold. Lengths stop growing once one misses the time limit.
"""

import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cirrus.evals.corpus import Corpus
from cirrus.evals.errors import EvalError
from cirrus.evals.machine import machine_summary, utc_now
from cirrus.evals.models import inspect_model
from cirrus.evals.runner import run_probe

DEFAULT_STEPS = (512, 1024, 2048, 4096)
DECODE_TOKENS = 16
MIB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    time_limit_s: float | None = None
    memory_budget_bytes: int | None = None


@dataclass
class ContextPoint:
    context: int
    prompt_tokens: int
    ttft_s: float
    prompt_tps: float
    decode_tps: float
    peak_rss_bytes: int
    fits: bool


@dataclass
class ContextReport:
    model: str
    context_window: int | None
    limits: dict[str, Any]
    machine: dict[str, Any]
    date: str
    points: list[ContextPoint] = field(default_factory=list)
    largest_fitting: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def context_steps(window: int | None, max_context: int | None, steps: list[int] | None) -> list[int]:
    """The lengths to measure: the given steps, or doubling from 512, never beyond the limit or the window."""
    limit = max_context or min(window or DEFAULT_STEPS[-1], DEFAULT_STEPS[-1])
    if window is not None:
        limit = min(limit, window)
    if steps:
        chosen = sorted({s for s in steps if s <= limit})
    else:
        chosen = [s for s in DEFAULT_STEPS if s <= limit]
        while chosen and chosen[-1] * 2 <= limit:
            chosen.append(chosen[-1] * 2)
        if limit not in chosen and limit >= DEFAULT_STEPS[0]:
            chosen.append(limit)
    if not chosen or chosen[0] < 2 * DECODE_TOKENS:
        raise EvalError(f"no context length to measure between {2 * DECODE_TOKENS} and {limit} tokens")
    return chosen


def fits(point: ContextPoint, limits: Limits) -> bool:
    in_time = limits.time_limit_s is None or point.ttft_s <= limits.time_limit_s
    in_memory = limits.memory_budget_bytes is None or point.peak_rss_bytes <= limits.memory_budget_bytes
    return in_time and in_memory


def _measure(model: Path, corpus: Corpus, length: int, threads: int, limits: Limits) -> ContextPoint:
    request = {"task": "speed", "model": str(model), "text": corpus.text, "n_ctx": length, "threads": threads}
    result = run_probe({**request, "decode_tokens": DECODE_TOKENS, "prompt_tokens": length})
    point = ContextPoint(
        context=length,
        prompt_tokens=result["prompt_tokens"],
        ttft_s=result["ttft_s"],
        prompt_tps=result["prompt_tps"],
        decode_tps=result["decode_tps"],
        peak_rss_bytes=result["peak_rss_bytes"],
        fits=False,
    )
    point.fits = fits(point, limits)
    return point


def evaluate_context(
    model: Path,
    corpus: Corpus,
    lengths: list[int] | None,
    max_context: int | None,
    limits: Limits,
    threads: int = 2,
) -> ContextReport:
    file = inspect_model(model)
    if file.is_embedding:
        raise EvalError(f"{model} is an embedding model; `eval context` measures text-generation models")
    report = ContextReport(str(model), file.context_window, asdict(limits), machine_summary(), utc_now())
    for length in context_steps(file.context_window, max_context, lengths):
        print(f"cirrus eval: {model.name}: context {length}", file=sys.stderr, flush=True)
        point = _measure(model, corpus, length, threads, limits)
        report.points.append(point)
        if point.fits:
            report.largest_fitting = length
        if limits.time_limit_s is not None and point.ttft_s > limits.time_limit_s:
            break  # a longer prompt only takes longer
    return report


def context_table(report: ContextReport) -> str:
    lines = [
        f"{'CONTEXT':>8} {'PROMPT':>7} {'TTFT s':>8} {'PROMPT t/s':>10} {'DECODE t/s':>10} {'PEAK MiB':>9}  FITS"
    ]
    for p in report.points:
        lines.append(
            f"{p.context:>8} {p.prompt_tokens:>7} {p.ttft_s:>8.3f} {p.prompt_tps:>10.0f} {p.decode_tps:>10.1f} "
            f"{p.peak_rss_bytes / MIB:>9.0f}  {'yes' if p.fits else 'no'}"
        )
    largest = report.largest_fitting
    lines.append(f"largest context within the limits: {largest if largest is not None else 'none measured'}")
    return "\n".join(lines)
