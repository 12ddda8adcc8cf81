"""`cirrus finetunes`: Workers AI's fine-tune management from the command line, against a running gateway.

`create --model M --name N [--description D]` makes a finetune and prints its id; `upload ID_OR_NAME DIR` sends
the PEFT output folder's adapter_config.json and adapter_model.safetensors (the server checks and converts them)
and says whether it is ready; `list` prints the account's finetunes."""

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from cirrus.finetunes.model import Asset

DEFAULT_URL = "http://127.0.0.1:8787"
DEFAULT_MODEL = "@cf/huggingface/smollm2-135m-instruct"
UPLOAD_TIMEOUT_S = 900.0  # a 300 MB upload, then its conversion


class FinetuneCliError(Exception):
    pass


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    finetunes = commands.add_parser("finetunes", help="create LoRA fine-tunes and upload their adapters")
    verbs = finetunes.add_subparsers(dest="verb", required=True)
    create = verbs.add_parser("create", help="create a finetune for a base model")
    create.add_argument("--model", default=DEFAULT_MODEL, help="the base model (default: %(default)s)")
    create.add_argument("--name", required=True, help="unique in the account: letters, digits, '.', '_', '-'")
    create.add_argument("--description")
    create.set_defaults(handler=cmd_create)
    upload = verbs.add_parser("upload", help="upload a PEFT adapter folder's two files to a finetune")
    upload.add_argument("finetune", help="the finetune's id or name")
    upload.add_argument("folder", type=Path, help="holds adapter_config.json and adapter_model.safetensors")
    upload.set_defaults(handler=cmd_upload)
    listing = verbs.add_parser("list", help="the account's finetunes")
    listing.set_defaults(handler=cmd_list)
    for verb in (create, upload, listing):
        verb.add_argument("--url", default=DEFAULT_URL)
        verb.add_argument("--token", default=os.environ.get("CIRRUS_TOKEN"), help="default: $CIRRUS_TOKEN")


def cmd_create(args: argparse.Namespace) -> int:
    body = {"model": args.model, "name": args.name}
    if args.description:
        body["description"] = args.description
    return _run(lambda: print(call(args, "POST", "/ai/finetunes", json=body)["id"]))


def cmd_upload(args: argparse.Namespace) -> int:
    return _run(lambda: upload_folder(args))


def cmd_list(args: argparse.Namespace) -> int:
    return _run(lambda: print_table(call(args, "GET", "/ai/finetunes")))


def upload_folder(args: argparse.Namespace) -> None:
    paths = [args.folder / asset.value for asset in Asset]
    absent = [str(path) for path in paths if not path.is_file()]
    if absent:
        raise FinetuneCliError(f"not found: {', '.join(absent)} (a PEFT output folder holds both)")
    result: dict[str, Any] = {}
    for asset, path in zip(Asset, paths, strict=True):
        print(f"uploading {path} ({path.stat().st_size:,} bytes)", file=sys.stderr)
        with path.open("rb") as stream:
            result = call(
                args,
                "POST",
                f"/ai/finetunes/{args.finetune}/finetune-assets",
                data={"file_name": asset.value},
                files={"file": (asset.value, stream, "application/octet-stream")},
            )
    state = "ready" if result.get("ready") else "not ready"
    print(f"{result['name']} ({result['id']}): {state}")


def print_table(finetunes: list[dict[str, Any]]) -> None:
    rows = [("ID", "NAME", "MODEL", "READY", "CREATED")]
    rows += [
        (f["id"], f["name"], f["model"], "yes" if f.get("ready") else "no", f["created_at"])
        for f in finetunes
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def call(args: argparse.Namespace, method: str, path: str, **request: Any) -> Any:
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    try:
        response = httpx.request(
            method, f"{args.url.rstrip('/')}{path}", headers=headers, timeout=UPLOAD_TIMEOUT_S, **request
        )
    except httpx.TransportError as error:
        raise FinetuneCliError(f"{args.url}: {type(error).__name__}: {error}") from None
    try:
        answer = response.json()
    except ValueError:
        raise FinetuneCliError(
            f"{args.url} answered HTTP {response.status_code}, not a Cirrus reply"
        ) from None
    if not answer.get("success"):
        errors = answer.get("errors") or [{"message": f"HTTP {response.status_code}"}]
        raise FinetuneCliError("; ".join(f"{e.get('message')} (code {e.get('code')})" for e in errors))
    return answer["result"]


def _run(action: Callable[[], object]) -> int:
    try:
        action()
    except FinetuneCliError as error:
        print(f"cirrus: {error}", file=sys.stderr)
        return 1
    return 0
