"""`cirrus push` and `cirrus pull`: move GGUF model artifacts to and from an OCI registry."""

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cirrus.config import Settings

if TYPE_CHECKING:
    from cirrus.store.registry_credentials import CredentialStore

MIB = 1024 * 1024


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    push = commands.add_parser("push", help="push a GGUF to an OCI registry as a model artifact")
    push.add_argument(
        "path", help="the .gguf file, or a packed variant of the local store: @cf/org/name:QUANT"
    )
    push.add_argument("reference", help="where to push it, e.g. 127.0.0.1:5000/models/smollm2:q4_1")
    push.add_argument("--manifest", help="artifact manifest fields: a JSON file, or inline JSON")
    _insecure_option(push)
    _credential_options(push)
    push.set_defaults(handler=cmd_push)
    pull = commands.add_parser("pull", help="pull a model artifact from an OCI registry into the local cache")
    pull.add_argument("reference")
    pull.add_argument(
        "--replace",
        action="store_true",
        help="record the pulled manifest even where a local one names a different blob",
    )
    _insecure_option(pull)
    _credential_options(pull)
    pull.set_defaults(handler=cmd_pull)


def _insecure_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--insecure", action="store_true", help="plain HTTP (the default for registries on 127.0.0.1)"
    )


def _credential_options(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--username",
        help="log in to the registry as this user, with the password or token read from standard input "
        "(else CIRRUS_REGISTRY_USERNAME/CIRRUS_REGISTRY_PASSWORD, else ~/.docker/config.json, else anonymous)",
    )
    command.add_argument(
        "--password-stdin", action="store_true", help="read the password for --username from standard input"
    )


def _credentials(args: argparse.Namespace) -> "CredentialStore":
    from cirrus.store.registry_credentials import CredentialsError, CredentialStore

    store = CredentialStore.from_settings(Settings())
    if args.username is None and not args.password_stdin:
        return store
    if args.username is None or not args.password_stdin:
        raise CredentialsError("--username and --password-stdin go together")
    password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise CredentialsError("--password-stdin read an empty password")
    return store.with_login(args.username, password, "--username/--password-stdin")


def cmd_push(args: argparse.Namespace) -> int:
    from cirrus.store.oci import InvalidArtifact, Reference, RegistryError
    from cirrus.store.push import describe_gguf, push

    # oras logs what it cannot do before raising; the error printed below says it once, in one line.
    logging.getLogger("oras").addHandler(logging.NullHandler())
    try:
        reference = Reference.parse(args.reference)
        credentials = _credentials(args).for_registry(reference.registry)
        path, packed = _source(args.path)
        if not path.is_file():
            raise InvalidArtifact(f"{path} is not a file")
        artifact = describe_gguf(path, packed | _manifest_fields(args.manifest))
        push(path, reference, artifact, args.insecure, credentials)
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
    from cirrus.store.manifest import ManifestError
    from cirrus.store.oci import RegistryError
    from cirrus.store.pull import Puller

    store = LocalStore.from_settings(Settings())
    try:
        puller = Puller(store.root, _credentials(args))
        pulled = asyncio.run(puller.pull(args.reference, args.insecure))
    except RegistryError as exc:
        return _fail(exc)
    print(f"pulled {pulled.reference} ({pulled.digest}) to {pulled.path}")
    try:
        recorded = record_pulled(store, pulled, args.replace)
    except ManifestError as exc:
        return _fail(exc)
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
