"""`cirrus batch`: Workers AI's async Batch API from the command line, against a running gateway.

`submit FILE.jsonl --model M` queues one request per line (each an `/ai/run` input, optionally with
`external_reference`) and prints the batch's `request_id`; `status ID --model M` prints its progress;
`results ID --model M` waits with a progress bar, then writes one JSON line per request, in order."""

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm  # type: ignore[import-untyped]

from cirrus.cli_client import CliCallError
from cirrus.cli_client import call as cli_call

DEFAULT_URL = "http://127.0.0.1:8787"
DEFAULT_MODEL = "@cf/huggingface/smollm2-135m-instruct"
POLL_S = 1.0


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    batch = commands.add_parser("batch", help="queue requests as a batch and read their results")
    verbs = batch.add_subparsers(dest="verb", required=True)
    submit = verbs.add_parser("submit", help="queue one request per line of a JSONL file")
    submit.add_argument("file", type=Path)
    submit.set_defaults(handler=cmd_submit)
    status = verbs.add_parser("status", help="a batch's progress")
    status.add_argument("request_id")
    status.set_defaults(handler=cmd_status)
    results = verbs.add_parser("results", help="wait for a batch, then print its responses as JSON lines")
    results.add_argument("request_id")
    results.add_argument("--out", type=Path, help="write the lines to this file (default: standard output)")
    results.add_argument("--timeout", type=float, default=86_400.0, help="give up after this many seconds")
    results.set_defaults(handler=cmd_results)
    for verb in (submit, status, results):
        verb.add_argument("--model", default=DEFAULT_MODEL, help="the batch's model")
        verb.add_argument("--url", default=DEFAULT_URL)
        verb.add_argument("--token", default=os.environ.get("CIRRUS_TOKEN"), help="default: $CIRRUS_TOKEN")


def cmd_submit(args: argparse.Namespace) -> int:
    try:
        requests = read_requests(args.file)
        result = call(args, {"requests": requests})
    except CliCallError as error:
        print(f"cirrus: {error}", file=sys.stderr)
        return 1
    print(result["request_id"])
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    try:
        result = call(args, {"request_id": args.request_id})
    except CliCallError as error:
        print(f"cirrus: {error}", file=sys.stderr)
        return 1
    print(json.dumps({key: value for key, value in result.items() if key != "responses"}))
    return 0


def cmd_results(args: argparse.Namespace) -> int:
    try:
        result = wait_for(args)
    except CliCallError as error:
        print(f"cirrus: {error}", file=sys.stderr)
        return 1
    lines = "".join(json.dumps(response) + "\n" for response in result["responses"])
    if args.out:
        args.out.write_text(lines)
    else:
        sys.stdout.write(lines)
    failed = sum(not response["success"] for response in result["responses"])
    print(f"{len(result['responses'])} responses, {failed} failed", file=sys.stderr)
    return 0


def read_requests(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text("utf-8").splitlines()
    except OSError as error:
        raise CliCallError(f"{path}: {error.strerror}") from None
    requests: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError as error:
            raise CliCallError(f"{path}:{number}: not JSON ({error})") from None
        if not isinstance(request, dict):
            raise CliCallError(f"{path}:{number}: each line must be a JSON object, one request's input")
        requests.append(request)
    if not requests:
        raise CliCallError(f"{path}: no requests in it")
    return requests


def wait_for(args: argparse.Namespace) -> dict[str, Any]:
    deadline = time.monotonic() + args.timeout
    with tqdm(unit="request", desc=args.request_id, file=sys.stderr, leave=False) as bar:
        while True:
            result = call(args, {"request_id": args.request_id})
            if "responses" in result:
                return result
            bar.total = result.get("total")
            bar.update(int(result.get("done", 0)) - bar.n)
            if time.monotonic() > deadline:
                raise CliCallError(
                    f"{args.request_id} is still {result.get('status')} after {args.timeout:.0f}s"
                )
            time.sleep(POLL_S)


def call(args: argparse.Namespace, body: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = cli_call(
        args, "POST", f"/ai/run/{args.model}?queueRequest=true", 120.0, json=body
    )
    return result
