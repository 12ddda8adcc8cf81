"""What the CLI's commands that talk to a running gateway share (`cirrus finetunes`, `cirrus rag`): one call in
Cloudflare's envelope, its result or a `CliCallError` with the server's own messages, and the exit status."""

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

import httpx

DEFAULT_URL = "http://127.0.0.1:8787"


class CliCallError(Exception):
    pass


def add_connection(parser: argparse.ArgumentParser, token: str | None) -> None:
    parser.add_argument("--url", default=DEFAULT_URL)
    parser.add_argument("--token", default=token, help="default: $CIRRUS_TOKEN")


def call(args: argparse.Namespace, method: str, path: str, timeout_s: float, **request: Any) -> Any:
    """The `result` of a call to the gateway at `args.url`, as `args.token`."""
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    try:
        response = httpx.request(
            method, f"{args.url.rstrip('/')}{path}", headers=headers, timeout=timeout_s, **request
        )
    except httpx.TransportError as error:
        raise CliCallError(f"{args.url}: {type(error).__name__}: {error}") from None
    try:
        answer = response.json()
    except ValueError:
        raise CliCallError(f"{args.url} answered HTTP {response.status_code}, not a Cirrus reply") from None
    if not answer.get("success"):
        errors = answer.get("errors") or [{"message": f"HTTP {response.status_code}"}]
        raise CliCallError("; ".join(f"{e.get('message')} (code {e.get('code')})" for e in errors))
    return answer["result"]


def exit_status(action: Callable[[], object]) -> int:
    """0 once `action` ran; 1, with the error on stderr, if a call failed."""
    try:
        action()
    except CliCallError as error:
        print(f"cirrus: {error}", file=sys.stderr)
        return 1
    return 0


def print_table(rows: Sequence[tuple[str, ...]]) -> None:
    """Rows of text in aligned columns, the first being the header."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
