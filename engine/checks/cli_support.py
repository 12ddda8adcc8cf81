"""What the checks share on the command line: one error type for bad input, reported in one line."""

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

Handler = Callable[[argparse.Namespace], int]
INSTALLED = "installed"  # the lib directory of the llama_cpp package this Python imports


class CheckError(Exception):
    """Bad input or a failed engine call: printed as one line, exit status 2."""


def exit_with(main: Callable[[], int]) -> None:
    """Runs main and exits with its status; a CheckError becomes `error: ...` on stderr and status 2."""
    try:
        status = main()
    except CheckError as error:
        print(f"error: {error}", file=sys.stderr)
        status = 2
    sys.exit(status)


def existing_file(path: str, what: str) -> str:
    """The path if it names a readable file, else a CheckError naming it."""
    try:
        with open(path, "rb"):
            return path
    except OSError as error:
        raise CheckError(f"{what} {path}: {error.strerror}") from None


def gguf_file(path: str) -> str:
    """The path if it names a GGUF file (checked by its magic), else a CheckError naming it."""
    with open(existing_file(path, "model"), "rb") as f:
        if f.read(4) != b"GGUF":
            raise CheckError(f"model {path}: not a GGUF file")
    return path


def writable_output(path: str) -> str:
    """The path if its directory exists, so that a long dump does not fail only at the end."""
    if not Path(path).resolve().parent.is_dir():
        raise CheckError(f"output {path}: directory {Path(path).parent} does not exist")
    return path


def dump_compare_parser(
    description: str | None, dump: Handler, compare: Handler, what: str, suffix: str
) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """`dump --lib DIR MODEL.gguf OUT` and `compare A B`; returns the parser and its dump subparser, for the
    options of a dump's own."""
    root = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = root.add_subparsers(required=True, metavar="{dump,compare}")
    dumping = commands.add_parser("dump", help=f"save {what}")
    dumping.add_argument("--lib", required=True, help=f"a llama.cpp build's bin directory, or '{INSTALLED}'")
    dumping.add_argument("model", metavar="MODEL.gguf")
    dumping.add_argument("output", metavar=f"OUT{suffix}")
    dumping.set_defaults(handler=dump)
    comparing = commands.add_parser("compare", help="compare two dumps (exit 1 on any difference)")
    comparing.add_argument("a", metavar=f"A{suffix}")
    comparing.add_argument("b", metavar=f"B{suffix}")
    comparing.set_defaults(handler=compare)
    return root, dumping


def run_handler(root: argparse.ArgumentParser) -> int:
    """Parses the command line and runs the subcommand's handler."""
    args = root.parse_args()
    status: int = args.handler(args)
    return status
