"""`cirrus push` and `cirrus pull`: move GGUF model artifacts to and from an OCI registry."""

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from cirrus.config import Settings

MIB = 1024 * 1024


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    push = commands.add_parser("push", help="push a GGUF to an OCI registry as a model artifact")
    push.add_argument(
        "path", help="the .gguf file, or a packed variant of the local store: @cf/org/name:QUANT"
    )
    push.add_argument("reference", help="where to push it, e.g. 127.0.0.1:5000/models/smollm2:q4_1")
    push.add_argument("--manifest", help="artifact manifest fields: a JSON file, or inline JSON")
    _insecure_option(push)
    push.set_defaults(handler=cmd_push)
    pull = commands.add_parser("pull", help="pull a model artifact from an OCI registry into the local cache")
    pull.add_argument("reference")
    _insecure_option(pull)
    pull.set_defaults(handler=cmd_pull)


def _insecure_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--insecure", action="store_true", help="plain HTTP (the default for registries on 127.0.0.1)"
    )


def cmd_push(args: argparse.Namespace) -> int:
    from cirrus.store.oci import InvalidArtifact, Reference, RegistryError
    from cirrus.store.push import describe_gguf, push

    try:
        reference = Reference.parse(args.reference)
        path, packed = _source(args.path)
        if not path.is_file():
            raise InvalidArtifact(f"{path} is not a file")
        artifact = describe_gguf(path, packed | _manifest_fields(args.manifest))
        push(path, reference, artifact, args.insecure)
    except RegistryError as exc:
        return _fail(exc)
    print(f"pushed {reference} ({artifact['digest']}, {artifact['size'] / MIB:.1f} MiB)")
    return 0


def _source(text: str) -> tuple[Path, dict[str, Any]]:
    """The GGUF to push and the manifest fields known for it: a packed variant's whole manifest, else none."""
    if not text.startswith("@"):
        return Path(text), {}
    from cirrus.store.exchange import packed_source
    from cirrus.store.local import LocalStore

    return packed_source(LocalStore.from_settings(Settings()), text)


def cmd_pull(args: argparse.Namespace) -> int:
    from cirrus.store.exchange import record_pulled
    from cirrus.store.local import LocalStore
    from cirrus.store.oci import RegistryError
    from cirrus.store.pull import Puller

    store = LocalStore.from_settings(Settings())
    try:
        pulled = asyncio.run(Puller(store.root).pull(args.reference, args.insecure))
    except RegistryError as exc:
        return _fail(exc)
    print(f"pulled {pulled.reference} ({pulled.digest}) to {pulled.path}")
    recorded = record_pulled(store, pulled)
    if recorded is not None:
        print(f"recorded as {recorded.ref} in {store.root}")
    return 0


def _manifest_fields(text: str | None) -> dict[str, Any]:
    from cirrus.store.oci import InvalidArtifact

    if text is None:
        return {}
    source = text if text.lstrip().startswith("{") else None
    try:
        raw = source if source is not None else Path(text).read_text()
        fields = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise InvalidArtifact(
            f"--manifest {text!r} is neither inline JSON nor a readable JSON file: {exc}"
        ) from exc
    if not isinstance(fields, dict):
        raise InvalidArtifact("--manifest must hold a JSON object")
    return fields


def _fail(error: Exception) -> int:
    print(f"cirrus: {error}", file=sys.stderr)
    return 1
