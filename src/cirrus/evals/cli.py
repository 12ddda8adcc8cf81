"""`cirrus eval quality`, `cirrus eval context`, `cirrus bench` and `cirrus cost`."""

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cirrus.evals.errors import EvalError

if TYPE_CHECKING:  # the store and the engine-side modules load only when a command needs them
    from cirrus.evals.quality import QualityReport
    from cirrus.store.local import LocalStore
    from cirrus.store.manifest import Manifest

ModelFile = tuple[Path, "Manifest | None"]

DEFAULT_URL = "http://127.0.0.1:8787"


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    evals = commands.add_parser("eval", help="measure models: quality against a reference, context limits")
    kinds = evals.add_subparsers(dest="eval_command", required=True)
    _quality_parser(kinds)
    _context_parser(kinds)
    _bench_parser(commands)
    _cost_parser(commands)


def _quality_parser(kinds: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    quality = kinds.add_parser("quality", help="perplexity, KL and top-1 agreement against a reference GGUF")
    quality.add_argument(
        "reference", help="the reference: a GGUF (e.g. the F16), or a packed variant @cf/org/name:QUANT"
    )
    quality.add_argument(
        "candidates",
        nargs="+",
        help="one or more candidates: GGUFs or packed variants (their manifests record the results)",
    )
    quality.add_argument("--corpus", type=Path, help="a UTF-8 text file (default: Python stdlib docstrings)")
    quality.add_argument("--tokens", type=int, default=4096, help="corpus tokens to score (default 4096)")
    quality.add_argument("--ctx", type=int, default=512, help="window size in tokens (default 512)")
    quality.add_argument("--threads", type=int, default=2)
    quality.add_argument("--json", type=Path, help="write the report as JSON to this file")
    quality.add_argument("--markdown", type=Path, help="write the report as Markdown to this file")
    quality.set_defaults(handler=_guarded(cmd_quality))


def _context_parser(kinds: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    context = kinds.add_parser("context", help="TTFT, decode rate and memory at growing context lengths")
    context.add_argument("model", type=Path)
    context.add_argument(
        "--max-context", type=int, help="the longest context to try (default: min(window, 4096))"
    )
    context.add_argument("--step", type=int, nargs="+", help="explicit context lengths to measure")
    context.add_argument("--time-limit-s", type=float, help="the longest acceptable time to first token")
    context.add_argument("--memory-budget-bytes", type=int, help="the most resident memory acceptable")
    context.add_argument(
        "--corpus", type=Path, help="text to fill the prompts with (default: stdlib docstrings)"
    )
    context.add_argument("--threads", type=int, default=2)
    context.add_argument("--json", action="store_true", help="print the report as JSON")
    context.set_defaults(handler=_guarded(cmd_context))


def _bench_parser(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    from cirrus.catalog import DEFAULT_MODEL

    bench = commands.add_parser("bench", help="latency percentiles and throughput of a running server")
    bench.add_argument("--url", default=DEFAULT_URL)
    bench.add_argument("--model", default=DEFAULT_MODEL)
    bench.add_argument("-n", "--requests", type=int, default=16)
    bench.add_argument("-c", "--concurrency", type=int, default=4)
    bench.add_argument("--prompt-tokens", type=int, default=128, help="about this many prompt tokens")
    bench.add_argument("--max-tokens", type=int, default=64)
    bench.add_argument(
        "--token", default=os.environ.get("CIRRUS_TOKEN"), help="an API token (default: $CIRRUS_TOKEN)"
    )
    bench.add_argument("--cold", action="store_true", help="unload the model first and time its cold start")
    bench.add_argument("--json", type=Path, help="write the result as JSON to this file")
    bench.add_argument("--plot", type=Path, help="write a PNG of the latency distribution")
    bench.set_defaults(handler=_guarded(cmd_bench))


def _cost_parser(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    cost = commands.add_parser("cost", help="monthly cost serverless against reserved instances")
    cost.add_argument("--bench", type=Path, required=True, help="a `cirrus bench --json` result")
    cost.add_argument("--requests-per-day", type=float, required=True)
    cost.add_argument("--peak-to-mean", type=float, default=1.0)
    cost.add_argument("--input-tokens", type=float, required=True, help="mean prompt tokens per request")
    cost.add_argument("--output-tokens", type=float, required=True, help="mean output tokens per request")
    cost.add_argument("--price-per-million-input", type=float)
    cost.add_argument("--price-per-million-output", type=float)
    cost.add_argument("--preset", choices=["workers-ai"], help="the bench model's catalog prices, in neurons")
    cost.add_argument("--neuron-price", type=float, default=0.011, help="USD per 1,000 neurons")
    cost.add_argument("--reserved-hourly", type=float, help="USD per hour of one reserved instance")
    cost.add_argument("--plot", type=Path, help="write a PNG of cost against requests per day")
    cost.add_argument("--json", action="store_true", help="print the report as JSON")
    cost.set_defaults(handler=_guarded(cmd_cost))


Handler = Callable[[argparse.Namespace], int]


def _guarded(handler: Handler) -> Handler:
    """One line on stderr and exit status 1 for any evaluation error, never a traceback."""

    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except EvalError as exc:
            print(f"cirrus: {exc}", file=sys.stderr)
            return 1
        except OSError as exc:
            print(f"cirrus: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
            return 1

    return run


def _write(path: Path | None, text: str) -> None:
    if path is not None:
        path.write_text(text)
        print(f"wrote {path}", file=sys.stderr)


def _corpus(path: Path | None) -> Any:
    from cirrus.evals.corpus import CorpusError, load_corpus

    try:
        return load_corpus(path)
    except CorpusError as exc:
        raise EvalError(str(exc)) from None


def _model_file(name: str, store: "LocalStore") -> ModelFile:
    """A GGUF path as given, or a packed variant (`@cf/org/name:QUANT`) resolved to its blob and manifest."""
    from cirrus.store.blobs import BlobError
    from cirrus.store.manifest import ManifestError

    if not name.startswith("@"):
        return Path(name), None
    try:
        manifest = store.resolve(name)
        return store.blob_path(manifest), manifest
    except (ManifestError, BlobError) as exc:
        raise EvalError(str(exc)) from None


def cmd_quality(args: argparse.Namespace) -> int:
    from cirrus.config import Settings
    from cirrus.evals.quality import QualitySettings, evaluate_quality
    from cirrus.evals.report import markdown, table
    from cirrus.store.local import LocalStore

    store = LocalStore.from_settings(Settings())
    names = [args.reference, *args.candidates]
    files = [_model_file(name, store) for name in names]
    settings = QualitySettings(tokens=args.tokens, n_ctx=args.ctx, threads=args.threads)
    report = evaluate_quality(files[0][0], [path for path, _ in files[1:]], _corpus(args.corpus), settings)
    for row, name, (_, manifest) in zip(report.models, names, files, strict=True):
        row.model = name if manifest is not None else row.model  # a reference reads better than a blob path
    print(table(report))
    _write(args.json, json.dumps(report.to_json(), indent=2) + "\n")
    _write(args.markdown, markdown(report))
    _record(store, report, files)
    return 0


def _record(store: "LocalStore", report: "QualityReport", files: list[ModelFile]) -> None:
    """Each candidate given as a packed variant keeps its results in its manifest."""
    from cirrus.evals.quality import evaluation_summary

    reference = report.models[0].model
    for row, (_, manifest) in zip(report.models[1:], files[1:], strict=True):
        if manifest is not None:
            store.set_evaluation(
                manifest.model_id, manifest.quantization, evaluation_summary(report, row, reference)
            )
            print(f"recorded the evaluation in the manifest of {manifest.ref}", file=sys.stderr)


def cmd_context(args: argparse.Namespace) -> int:
    from cirrus.evals.context import Limits, context_table, evaluate_context

    limits = Limits(args.time_limit_s, args.memory_budget_bytes)
    report = evaluate_context(
        args.model, _corpus(args.corpus), args.step, args.max_context, limits, args.threads
    )
    print(json.dumps(report.to_json(), indent=2) if args.json else context_table(report))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from cirrus.evals.bench import BenchConfig, bench_table, run_bench

    config = BenchConfig(
        args.url,
        args.model,
        args.requests,
        args.concurrency,
        args.prompt_tokens,
        args.max_tokens,
        args.token,
        args.cold,
    )
    result = asyncio.run(run_bench(config))
    print(bench_table(result))
    _write(args.json, json.dumps(result, indent=2) + "\n")
    if args.plot is not None:
        from cirrus.evals.plots import latency_plot

        latency_plot(result, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0


def _bench_result(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise EvalError(f"bench result not found: {path}") from None
    except (ValueError, UnicodeDecodeError):
        raise EvalError(f"{path} is not JSON; pass the file `cirrus bench --json` wrote") from None


def _prices(args: argparse.Namespace, bench: Any) -> Any:
    from cirrus.evals.cost import TokenPrices

    explicit = (args.price_per_million_input, args.price_per_million_output)
    if args.preset and any(p is not None for p in explicit):
        raise EvalError("give either --preset or --price-per-million-input/-output, not both")
    if args.preset:
        pricing = _catalog_pricing(str(bench.get("model") if isinstance(bench, dict) else ""))
        explicit = (pricing.input_per_million, pricing.output_per_million)
    if any(p is None for p in explicit):
        raise EvalError(
            "give --price-per-million-input and --price-per-million-output, or --preset workers-ai"
        )
    if any(p < 0 for p in (*explicit, args.neuron_price)):
        raise EvalError("prices cannot be negative")
    return TokenPrices(explicit[0], explicit[1], args.neuron_price)


def _catalog_pricing(model: str) -> Any:
    from cirrus.catalog import CatalogError, load_catalog
    from cirrus.catalog.registered import registered_models_path
    from cirrus.config import Settings
    from cirrus.errors import NoSuchModel

    settings = Settings()
    try:
        return (
            load_catalog(settings.catalog, settings.cache_dir, registered_models_path(settings.state_dir))
            .get(model)
            .pricing
        )
    except (CatalogError, NoSuchModel) as exc:
        raise EvalError(f"no catalog prices for the bench's model {model!r}: {exc}") from None


def _traffic(args: argparse.Namespace) -> Any:
    from cirrus.evals.cost import Traffic

    if args.requests_per_day <= 0 or args.peak_to_mean < 1:
        raise EvalError("--requests-per-day must be positive and --peak-to-mean at least 1")
    if args.input_tokens < 0 or args.output_tokens < 0 or args.input_tokens + args.output_tokens <= 0:
        raise EvalError("--input-tokens and --output-tokens cannot be negative, nor both zero")
    if args.reserved_hourly is not None and args.reserved_hourly <= 0:
        raise EvalError("--reserved-hourly must be positive")
    return Traffic(args.requests_per_day, args.peak_to_mean, args.input_tokens, args.output_tokens)


def cmd_cost(args: argparse.Namespace) -> int:
    from cirrus.evals.cost import capacity_from_bench, cost_report, cost_table

    bench = _bench_result(args.bench)
    capacity, traffic, prices = capacity_from_bench(bench), _traffic(args), _prices(args, bench)
    report = cost_report(traffic, prices, capacity, args.reserved_hourly)
    report["model"] = bench.get("model")
    print(json.dumps(report, indent=2) if args.json else cost_table(report))
    if args.plot is not None:
        from cirrus.evals.plots import cost_plot

        cost_plot(traffic, prices, capacity, args.reserved_hourly, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0
