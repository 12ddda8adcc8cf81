"""`cirrus usage`: the caller's usage from a running gateway, as a table or as JSON."""

import argparse
import json
import os
import sys
from typing import Any

import httpx

DEFAULT_URL = "http://127.0.0.1:8787"
COLUMNS = (
    ("DAY", "day", 10),
    ("MODEL", "model", 40),
    ("TOKEN", "token_id", 16),
    ("REQUESTS", "requests", 8),
    ("ERRORS", "errors", 6),
    ("PROMPT", "prompt_tokens", 8),
    ("COMPLETION", "completion_tokens", 10),
    ("NEURONS", "neurons", 10),
    ("USD", "cost_usd", 10),
)


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    usage = commands.add_parser("usage", help="show usage per day, model and token")
    usage.add_argument("--url", default=DEFAULT_URL)
    usage.add_argument("--token", default=os.environ.get("CIRRUS_TOKEN"), help="default: $CIRRUS_TOKEN")
    usage.add_argument("--account", help="the account id (default: the token's own account)")
    usage.add_argument("--token-id", dest="token_id", help="only this token's usage")
    usage.add_argument("--model")
    usage.add_argument("--since", help="first UTC day, YYYY-MM-DD")
    usage.add_argument("--until", help="last UTC day, YYYY-MM-DD")
    usage.add_argument("--json", action="store_true", help="print the result as JSON")
    usage.set_defaults(handler=cmd_usage)


def cmd_usage(args: argparse.Namespace) -> int:
    result = _fetch(args)
    if result is None:
        return 1
    print(json.dumps(result, indent=2) if args.json else _table(result))
    return 0


def _fetch(args: argparse.Namespace) -> dict[str, Any] | None:
    path = f"/client/v4/accounts/{args.account}/ai/usage" if args.account else "/usage"
    params = {k: v for k in ("token_id", "model", "since", "until") if (v := getattr(args, k)) is not None}
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    try:
        response = httpx.get(f"{args.url.rstrip('/')}{path}", params=params, headers=headers, timeout=30)
    except httpx.TransportError as exc:
        print(f"cirrus: {args.url}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
    body = _json(response)
    if body is None or not body.get("success"):
        errors = (body or {}).get("errors") or [{"message": f"HTTP {response.status_code}", "code": None}]
        for error in errors:
            print(f"cirrus: {error.get('message')} (code {error.get('code')})", file=sys.stderr)
        return None
    result: dict[str, Any] = body["result"]
    return result


def _json(response: httpx.Response) -> dict[str, Any] | None:
    try:
        body = response.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _cell(row: dict[str, Any], key: str, width: int) -> str:
    value = row.get(key)
    if isinstance(value, float):
        return f"{value:>{width}.4f}" if key == "cost_usd" else f"{value:>{width}.1f}"
    if isinstance(value, int):
        return f"{value:>{width}}"
    return f"{value or '-':{width}}"


def _table(result: dict[str, Any]) -> str:
    lines = [
        " ".join(f"{title:{'<' if i < 3 else '>'}{width}}" for i, (title, _, width) in enumerate(COLUMNS))
    ]
    for row in result["rows"]:
        lines.append(" ".join(_cell(row, key, width) for _, key, width in COLUMNS))
    for day in result["days"]:
        lines.append(
            f"{day['day']}: {day['neurons']:.1f} neurons, {day['billable_neurons']:.1f} beyond the "
            f"{day['free_neurons']:,.0f} free, ${day['cost_usd']:.4f}"
        )
    return "\n".join(lines)
