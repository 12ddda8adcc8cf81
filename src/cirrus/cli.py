"""The `cirrus` command: serve, run, models, ps, load, unload; accounts, tokens and usage."""

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from cirrus.auth.cli import register as register_identity
from cirrus.batches.cli import register as register_batch
from cirrus.catalog import DEFAULT_MODEL, CatalogEntry, CatalogError, load_catalog
from cirrus.catalog.footprint import fit, footprints
from cirrus.catalog.registered import registered_models_path
from cirrus.config import Settings
from cirrus.evals.cli import register as register_evals
from cirrus.finetunes.cli import register as register_finetunes
from cirrus.metering.cli import register as register_usage
from cirrus.pack.cli import register as register_pack
from cirrus.rag.cli import register as register_rag
from cirrus.store.oci import RegistryError
from cirrus.store.registry_cli import register as register_registry

if TYPE_CHECKING:
    from cirrus.platform import Platform

DEFAULT_URL = "http://127.0.0.1:8787"
MIB = 1024 * 1024


def _settings(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    for name in (
        "host",
        "port",
        "catalog",
        "memory_budget_bytes",
        "request_timeout_s",
        "queue_size",
        "threads",
        "database",
        "redis_url",
        "cluster",
    ):
        value = getattr(args, name, None)
        if value is not None:
            overrides[name] = value
    if getattr(args, "allow_open", False):
        overrides["allow_open"] = True
    return Settings(**overrides)


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from cirrus.gateway.open_mode import open_mode_refusal, tokens_configured
    from cirrus.observability.logs import configure_logging
    from cirrus.server.app import create_app
    from cirrus.server.edge_limits import EdgeLimits
    from cirrus.server.edge_protocol import edge_protocol

    settings = _settings(args)
    configure_logging(logging.INFO)
    has_tokens = asyncio.run(tokens_configured(settings))
    refusal = open_mode_refusal(settings.host, has_tokens, settings.allow_open)
    if refusal:
        print(f"cirrus: {refusal}", file=sys.stderr)
        return 2
    try:
        platform = _platform(settings)
    except (CatalogError, RegistryError, ValueError) as exc:
        print(f"cirrus: {exc}", file=sys.stderr)
        return 2
    installed = [e.spec.id for e in platform.catalog.entries() if e.installed]
    log = logging.getLogger("cirrus")
    if not has_tokens:
        log.warning("running open: no API tokens are configured, so every request is served without one")
    log.info(
        "serving %d installed model(s) on http://%s:%d (memory budget %d MiB): %s",
        len(installed),
        settings.host,
        settings.port,
        settings.budget_bytes() // MIB,
        ", ".join(installed),
    )
    uvicorn.run(
        create_app(platform),
        host=settings.host,
        port=settings.port,
        log_level="info",
        log_config=None,  # uvicorn's loggers write through our JSON handler
        timeout_graceful_shutdown=10,
        http=edge_protocol(EdgeLimits.from_settings(settings)),  # head limits and connection caps
        ws="none",  # no WebSocket routes: an upgrade request is plain HTTP, and its connection stays counted
        timeout_keep_alive=settings.keep_alive_timeout_s,
    )
    return 0


def _platform(settings: Settings) -> "Platform":
    from cirrus.platform import Platform

    if settings.cluster is None:
        return Platform(settings)
    from cirrus.cluster.cluster import Cluster  # imports Ray: only a cluster gateway pays for it

    catalog = load_catalog(settings.catalog, settings.cache_dir, registered_models_path(settings.state_dir))
    cluster = Cluster(settings.cluster, catalog, settings.request_timeout_s, settings.cluster_node_ip)
    return Platform(settings, catalog, cluster=cluster)


def cmd_run(args: argparse.Namespace) -> int:
    from cirrus.sdk import Ai, AiError

    ai = Ai.local(catalog=args.catalog) if args.local else Ai.remote(args.url, token=args.token)
    inputs: dict[str, Any] = {"prompt": args.prompt}
    if args.max_tokens:
        inputs["max_tokens"] = args.max_tokens
    try:
        with ai:
            for event in ai.stream(args.model, inputs):
                print(event.get("response", ""), end="", flush=True)
    except AiError as exc:
        print(f"\ncirrus: {exc}", file=sys.stderr)
        return 1
    except httpx.ConnectError:
        print(
            f"cirrus: no server at {args.url}; start one with `cirrus serve`, or pass --local",
            file=sys.stderr,
        )
        return 1
    except httpx.TransportError as exc:  # a timeout, or a server that went away mid-answer
        print(f"\ncirrus: lost the connection to {args.url}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    print()
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    settings = _settings(args)
    try:
        catalog = load_catalog(
            settings.catalog, settings.cache_dir, registered_models_path(settings.state_dir)
        )
    except (CatalogError, OSError) as exc:  # OSError: a --catalog file that cannot be read
        print(f"cirrus models: {exc}", file=sys.stderr)
        return 2
    budget = settings.budget_bytes()
    if args.json:
        records = [_model_record(entry, budget) for entry in catalog.entries()]
        print(json.dumps({"memory_budget_bytes": budget, "models": records}, indent=2))
        return 0
    print(f"{'MODEL':45} {'TASK':16} {'CONTEXT':>8}  STATUS")
    for entry in catalog.entries():
        print(
            f"{entry.spec.id:45} {entry.spec.task:16} {entry.spec.context_window:>8}  {_status(entry, budget)}"
        )
        if not entry.installed and fit(entry.spec, budget) is not None and entry.spec.install_hint:
            print(f"    install: {entry.spec.install_hint}")
    return 0


def _status(entry: CatalogEntry, budget: int) -> str:
    """Installed; or not, with whether this machine can hold it (when the catalog gives its size) or the hint."""
    if entry.installed:
        return "installed"
    memory = fit(entry.spec, budget)
    if memory is not None:
        return f"not installed: {memory.describe()}"
    return f"not installed ({entry.spec.install_hint or 'no hint'})"


def _model_record(entry: CatalogEntry, budget: int) -> dict[str, Any]:
    spec = entry.spec
    memory = fit(spec, budget)
    return {
        "id": spec.id,
        "task": spec.task,
        "context_window": spec.context_window,
        "installed": entry.installed,
        "install_hint": spec.install_hint or None,
        "family": spec.family,
        "architecture": spec.architecture,
        "parameters": spec.parameters,
        "active_parameters": spec.active_parameters,
        "memory": None
        if memory is None
        else {
            "fits": memory.fits,
            "quant": memory.footprint.quant,
            "bytes": memory.footprint.total,
            "summary": memory.describe(),
            "kv_cache_counted": spec.kv_bytes_per_token is not None,
        },
        "footprints": {f.quant: f.total for f in footprints(spec)},
    }


def _admin(args: argparse.Namespace, method: str, path: str) -> dict[str, Any] | None:
    try:
        headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
        response = httpx.request(method, f"{args.url.rstrip('/')}{path}", headers=headers, timeout=300)
    except httpx.ConnectError:
        print(f"cirrus: no server at {args.url}", file=sys.stderr)
        return None
    except httpx.TransportError as exc:
        print(f"cirrus: {args.url}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        print(f"cirrus: {args.url} answered HTTP {response.status_code}, not a Cirrus reply", file=sys.stderr)
        return None
    if not body.get("success"):
        for error in body.get("errors") or [{"message": f"HTTP {response.status_code}"}]:
            print(f"cirrus: {error.get('message')} (code {error.get('code')})", file=sys.stderr)
        return None
    return body


def _expires(inst: dict[str, Any]) -> str:
    """When an idle instance will be stopped, as seconds from now; instances in use do not expire."""
    if inst["pinned"]:
        return "never"
    if inst["expires_at"] is None:
        return "-"
    return f"in {max(0.0, inst['expires_at'] - time.time()):.0f}s"


def cmd_ps(args: argparse.Namespace) -> int:
    body = _admin(args, "GET", "/admin/instances")
    if body is None:
        return 1
    print(f"{'NODE':12} {'MODEL':45} {'ID':9} {'STATE':9} {'PID':>7} {'MEMORY':>9} {'ACTIVE':>6}  EXPIRES")
    for inst in body["result"]["instances"]:
        print(
            f"{inst.get('node', '-')[:12]:12} {inst['model']:45} {inst['id']:9} {inst['state']:9} "
            f"{inst['pid'] or '-':>7} "
            f"{inst['memory_bytes'] // MIB:>6}MiB {inst['active_requests']:>6}  {_expires(inst)}"
        )
    return 0


def cmd_load(args: argparse.Namespace) -> int:
    body = _admin(args, "POST", f"/admin/models/{args.model}/load")
    print(json.dumps(body["result"], indent=2) if body else "", end="\n" if body else "")
    return 0 if body else 1


def cmd_unload(args: argparse.Namespace) -> int:
    body = _admin(args, "POST", f"/admin/models/{args.model}/unload")
    print(json.dumps(body["result"]) if body else "", end="\n" if body else "")
    return 0 if body else 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cirrus", description="Serverless LLM inference on your own machines"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the Workers AI and OpenAI APIs")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--catalog", type=Path, help="a catalog TOML file (default: the built-in one)")
    serve.add_argument("--memory-budget-bytes", dest="memory_budget_bytes", type=int)
    serve.add_argument("--request-timeout-s", dest="request_timeout_s", type=float)
    serve.add_argument("--queue-size", dest="queue_size", type=int)
    serve.add_argument("--threads", type=int)
    serve.add_argument("--database", help="a SQLite file or a postgresql:// DSN for tokens and usage")
    serve.add_argument(
        "--redis-url", dest="redis_url", help="share rate limits and the cache between gateways"
    )
    serve.add_argument(
        "--cluster", help="a Ray cluster's HOST:PORT (auto: RAY_ADDRESS): serve its nodes' models from here"
    )
    serve.add_argument(
        "--allow-open", action="store_true", help="serve a non-loopback address with no tokens configured"
    )
    serve.set_defaults(handler=cmd_serve)
    run = commands.add_parser("run", help="run a model and stream its answer")
    run.add_argument("model", nargs="?", default=DEFAULT_MODEL)
    run.add_argument("prompt")
    run.add_argument("--max-tokens", type=int)
    run.add_argument("--url", default=DEFAULT_URL)
    run.add_argument("--local", action="store_true", help="run embedded, without a server")
    run.add_argument("--catalog", type=Path)
    _token_option(run)
    run.set_defaults(handler=cmd_run)
    models = commands.add_parser("models", help="list the catalog")
    models.add_argument("--catalog", type=Path)
    models.add_argument(
        "--memory-budget-bytes", dest="memory_budget_bytes", type=int, help="judge fits against this budget"
    )
    models.add_argument("--json", action="store_true", help="print the catalog as JSON")
    models.set_defaults(handler=cmd_models)
    for name, handler, text in (
        ("ps", cmd_ps, "list running instances"),
        ("load", cmd_load, "prewarm a model"),
        ("unload", cmd_unload, "unload a model"),
    ):
        sub = commands.add_parser(name, help=text)
        if name != "ps":
            sub.add_argument("model")
        sub.add_argument("--url", default=DEFAULT_URL)
        _token_option(sub)
        sub.set_defaults(handler=handler)
    register_identity(commands)
    register_pack(commands)
    register_usage(commands)
    register_batch(commands)
    register_finetunes(commands)
    register_rag(commands)
    register_evals(commands)
    register_registry(commands)
    return parser


def _token_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--token", default=os.environ.get("CIRRUS_TOKEN"), help="an API token (default: $CIRRUS_TOKEN)"
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
