"""`cirrus pack` and `cirrus models add|remove`."""

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias, get_args

from cirrus.catalog.catalog import CatalogError, read_catalog
from cirrus.catalog.registered import RegistrationError, registered_models_path
from cirrus.config import Settings
from cirrus.pack.errors import PackError
from cirrus.pack.quants import Quant, UnknownQuant, parse_quant
from cirrus.pack.registration import add_model, remove_model
from cirrus.store.blobs import BlobError
from cirrus.store.local import LocalStore
from cirrus.store.manifest import ManifestError, ManifestTask

if TYPE_CHECKING:
    from cirrus.pack.pipeline import PackRequest

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
DEFAULT_QUANTS = ("F16", "Q8_0", "Q4_K_M")


def register(commands: Subparsers) -> None:
    _register_pack(commands)
    _register_models(commands.choices["models"])


def _register_pack(commands: Subparsers) -> None:
    sub = commands.add_parser("pack", help="convert and quantize a model into the local artifact store")
    sub.add_argument(
        "source", type=Path, help="a GGUF file (F32/F16/BF16) or a Hugging Face checkpoint folder"
    )
    sub.add_argument("--id", required=True, dest="model_id", help="the model's id, e.g. @cf/org/name")
    sub.add_argument("--task", choices=get_args(ManifestTask), help="default: read from the model")
    sub.add_argument("--quant", nargs="+", default=list(DEFAULT_QUANTS), help="targets, e.g. F16 Q8_0 Q4_K_M")
    sub.add_argument(
        "--allow-requantize",
        action="store_true",
        help="accept an already-quantized GGUF (via an F16 expansion)",
    )
    sub.add_argument("--threads", type=int, help="quantization threads (default: the settings')")
    sub.add_argument("--json", action="store_true", help="print the report as JSON")
    sub.set_defaults(handler=cmd_pack)


def _register_models(models: argparse.ArgumentParser) -> None:
    actions = models.add_subparsers(dest="models_command", metavar="{add,remove}")
    add = actions.add_parser("add", help="serve a packed artifact: cirrus models add @cf/org/name:QUANT")
    add.add_argument("artifact", help="@cf/org/name:QUANT, or the path of a manifest file")
    add.add_argument("--id", dest="new_id", help="serve it under this id (default: the manifest's)")
    add.add_argument("--replace", action="store_true", help="take the place of a model with the same id")
    add.add_argument(
        "--context", type=int, help="context window to serve (default: the model's, at most 8192)"
    )
    add.add_argument("--catalog", dest="add_catalog", type=Path, help="the catalog `cirrus serve` will use")
    add.set_defaults(handler=cmd_models_add)
    remove = actions.add_parser("remove", help="stop serving a registered model")
    remove.add_argument("model")
    remove.set_defaults(handler=cmd_models_remove)


def _fail(command: str, message: object) -> int:
    print(f"cirrus {command}: {message}", file=sys.stderr)
    return 1


def _os_message(exc: OSError) -> str:
    where = f": {exc.filename}" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"


def cmd_pack(args: argparse.Namespace) -> int:
    # Imported here: they load llama.cpp, which no other command (and never the server) should pay for.
    from cirrus.pack.pipeline import pack
    from cirrus.pack.report import as_json, as_table

    settings = Settings()
    try:
        targets = tuple(parse_quant(name) for name in args.quant)
    except UnknownQuant as exc:
        return _fail("pack", exc)
    request = _request(args, targets, args.threads or settings.threads)
    try:
        packed = pack(request, LocalStore.from_settings(settings))
    except PackError as exc:
        return _fail("pack", exc)
    except OSError as exc:
        return _fail("pack", f"could not write the store: {_os_message(exc)}; nothing was stored")
    except KeyboardInterrupt:
        print("cirrus pack: interrupted; nothing was stored", file=sys.stderr)
        return 130
    print(as_json(packed) if args.json else as_table(packed))
    return 0


def _request(args: argparse.Namespace, targets: tuple[Quant, ...], threads: int) -> "PackRequest":
    from cirrus.pack.pipeline import PackRequest

    command = ["cirrus", "pack", str(args.source), "--id", args.model_id]
    if args.task:
        command += ["--task", args.task]
    command += ["--quant", *(t.name for t in targets)]
    if args.allow_requantize:
        command.append("--allow-requantize")
    return PackRequest(
        source=args.source,
        model_id=args.model_id,
        task=args.task,
        targets=targets,
        allow_requantize=args.allow_requantize,
        threads=threads,
        command=command,
        show_progress=not args.json and sys.stderr.isatty(),
    )


def cmd_models_add(args: argparse.Namespace) -> int:
    settings = Settings()
    registry = registered_models_path(settings.state_dir)
    try:
        catalog_ids = {spec.id for spec in read_catalog(args.add_catalog or args.catalog or settings.catalog)}
        entry = add_model(
            LocalStore.from_settings(settings),
            registry,
            catalog_ids,
            args.artifact,
            model_id=args.new_id,
            replace=args.replace,
            context=args.context,
        )
    except (RegistrationError, ManifestError, BlobError, CatalogError) as exc:
        return _fail("models add", exc)
    except OSError as exc:
        return _fail("models add", _os_message(exc))
    print(f"registered {entry.spec.id} ({entry.artifact_ref}, {entry.digest[:19]}) in {registry}")
    return 0


def cmd_models_remove(args: argparse.Namespace) -> int:
    registry = registered_models_path(Settings().state_dir)
    try:
        remove_model(registry, args.model)
    except RegistrationError as exc:
        return _fail("models remove", exc)
    print(f"removed {args.model} from {registry}")
    return 0
