"""The quality report as a terminal table and as Markdown, from the same rows."""

from collections.abc import Callable
from pathlib import Path

from cirrus.evals.quality import ModelQuality, QualityReport

MIB = 1024 * 1024
Column = tuple[str, Callable[[ModelQuality, ModelQuality], str]]


def _number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _ppl_change(row: ModelQuality, reference: ModelQuality) -> str:
    if row.perplexity is None or not reference.perplexity:
        return "-"
    return f"{(row.perplexity / reference.perplexity - 1) * 100:+.2f}%"


COMMON_HEAD: list[Column] = [
    ("model", lambda r, _: Path(r.model).name),
    ("quant", lambda r, _: r.quantization),
    ("size MiB", lambda r, _: f"{r.size_bytes / MIB:.1f}"),
]
GENERATION: list[Column] = [
    ("perplexity", lambda r, _: _number(r.perplexity, 3)),
    ("Δppl", _ppl_change),
    ("KL mean", lambda r, _: _number(r.kl_mean, 5)),
    ("KL p99", lambda r, _: _number(r.kl_p99, 4)),
    ("top-1", lambda r, _: _number(None if r.top1_agreement is None else r.top1_agreement * 100, 1) + "%"),
]
EMBEDDING: list[Column] = [
    ("cos mean", lambda r, _: _number(r.cosine_mean, 5)),
    ("cos min", lambda r, _: _number(r.cosine_min, 5)),
]
COMMON_TAIL: list[Column] = [
    ("load s", lambda r, _: f"{r.load_s:.3f}"),
    ("peak RSS MiB", lambda r, _: f"{r.peak_rss_bytes / MIB:.0f}"),
    ("prompt t/s", lambda r, _: f"{r.prompt_tps:.0f}"),
    ("decode t/s", lambda r, _: _number(r.decode_tps, 0)),
]


def _columns(report: QualityReport) -> list[Column]:
    middle = EMBEDDING if report.kind == "text-embeddings" else GENERATION
    return COMMON_HEAD + middle + COMMON_TAIL


def _cells(report: QualityReport) -> tuple[list[str], list[list[str]]]:
    columns = _columns(report)
    reference = report.models[0]
    rows = [[cell(row, reference) for _, cell in columns] for row in report.models]
    return [name for name, _ in columns], rows


def _line(cells: list[str], widths: list[int]) -> str:
    """Names left-aligned (the first two columns), figures right-aligned."""
    return "  ".join(
        c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
    )


def table(report: QualityReport) -> str:
    header, rows = _cells(report)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    return "\n".join(_line(cells, widths) for cells in (header, *rows))


def markdown(report: QualityReport) -> str:
    header, rows = _cells(report)
    settings = report.settings
    lines = [
        f"# Quality: {Path(report.models[0].model).name} (reference) and {len(rows) - 1} candidate(s)",
        "",
        f"- date: {report.date}; machine: {report.machine['cpu']}, {report.machine['cores']} cores, "
        f"{settings['threads']} engine threads",
        f"- corpus: {report.corpus['source']} ({report.corpus['characters']:,} characters, "
        f"sha256 {report.corpus['sha256'][:16]}…)",
        f"- {settings['tokens']:,} tokens scored in windows of {settings['n_ctx']} tokens"
        if report.kind == "text-generation"
        else "- cosine similarity of each candidate's sentence embeddings to the reference's",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" if i < 2 else "---:" for i in range(len(header))) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
        "",
        _footnote(report),
    ]
    return "\n".join(lines) + "\n"


def _footnote(report: QualityReport) -> str:
    settings = report.settings
    if report.kind == "text-embeddings":
        return (
            "cos: cosine similarity of each sentence's normalised embedding to the reference's, mean and minimum. "
            "Peak RSS: the resident high-water mark of a process that loaded the model and embedded the "
            "sentences. Prompt t/s: tokens embedded per second."
        )
    return (
        "KL: KL(reference ‖ candidate) of next-token distributions in nats, mean and 99th percentile over "
        "positions. top-1: how often the candidate's most likely next token is the reference's. Peak RSS: the "
        "resident high-water mark of a process that loaded the model and generated "
        f"{settings['decode_tokens']} tokens. Prompt and decode rates: the fastest of "
        f"{settings.get('speed_runs', 1)} runs of a {settings['n_ctx'] // 2}-token prompt and "
        f"{settings['decode_tokens']} decoded tokens, on {settings['threads']} threads."
    )
