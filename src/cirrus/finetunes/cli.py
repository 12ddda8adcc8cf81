"""`cirrus finetunes`: Workers AI's fine-tune management from the command line, against a running gateway.

`create --model M --name N [--description D]` makes a finetune and prints its id; `upload ID_OR_NAME DIR` sends
the PEFT output folder's adapter_config.json and adapter_model.safetensors (the server checks and converts them)
and says whether it is ready; `list` prints the account's finetunes."""

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from cirrus.cli_client import CliCallError, add_connection, call, exit_status, print_table
from cirrus.finetunes.model import Asset

DEFAULT_MODEL = "@cf/huggingface/smollm2-135m-instruct"
UPLOAD_TIMEOUT_S = 900.0  # a 300 MB upload, then its conversion


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
        add_connection(verb, os.environ.get("CIRRUS_TOKEN"))


def cmd_create(args: argparse.Namespace) -> int:
    body = {"model": args.model, "name": args.name}
    if args.description:
        body["description"] = args.description
    return exit_status(lambda: print(call(args, "POST", "/ai/finetunes", UPLOAD_TIMEOUT_S, json=body)["id"]))


def cmd_upload(args: argparse.Namespace) -> int:
    return exit_status(lambda: upload_folder(args))


def cmd_list(args: argparse.Namespace) -> int:
    return exit_status(lambda: print_finetunes(call(args, "GET", "/ai/finetunes", UPLOAD_TIMEOUT_S)))


def upload_folder(args: argparse.Namespace) -> None:
    paths = [args.folder / asset.value for asset in Asset]
    absent = [str(path) for path in paths if not path.is_file()]
    if absent:
        raise CliCallError(f"not found: {', '.join(absent)} (a PEFT output folder holds both)")
    result: dict[str, Any] = {}
    for asset, path in zip(Asset, paths, strict=True):
        print(f"uploading {path} ({path.stat().st_size:,} bytes)", file=sys.stderr)
        with path.open("rb") as stream:
            result = call(
                args,
                "POST",
                f"/ai/finetunes/{args.finetune}/finetune-assets",
                UPLOAD_TIMEOUT_S,
                data={"file_name": asset.value},
                files={"file": (asset.value, stream, "application/octet-stream")},
            )
    state = "ready" if result.get("ready") else "not ready"
    print(f"{result['name']} ({result['id']}): {state}")


def print_finetunes(finetunes: list[dict[str, Any]]) -> None:
    rows = [("ID", "NAME", "MODEL", "READY", "CREATED")]
    rows += [
        (f["id"], f["name"], f["model"], "yes" if f.get("ready") else "no", f["created_at"])
        for f in finetunes
    ]
    print_table(rows)
