"""Proves that a llama.cpp build loads a GGUF's vocabulary and metadata exactly as another build does (patch
0002's promise), down to its log output.

    vocabulary.py dump --lib DIR MODEL.gguf OUT.json.gz [--quick] [--markdown-root DIR]
    vocabulary.py compare A.json.gz B.json.gz      exit 0: equal; 1: some value differs

dump uses the llama.cpp build in DIR (a build's bin directory, or "installed" for the llama_cpp package's own).
From a vocab-only load it records: n_vocab and, for every token id, its text, score (float32 bits), attributes,
is_eog, is_control and llama_token_to_piece with special off and on; the special ids and add_* flags; the
suppress tokens; every metadata key/value by index (so also llama_model_meta_*'s order), the description and
the chat template; the tokenization, with add_special and parse_special each off and on, of a corpus: every
*.md under --markdown-root (default: this repository; --quick: only the first 5), Unicode and whitespace
texts, every special token's text embedded in text, and the vocabulary's own texts in runs of 64; and hashes of
the detokenization of those tokens. From a full load: the metadata again and a greedy generation of 24 tokens
for 3 prompts (with a hash of the first logits). Every log line of both loads and of the context creation is
recorded with its level (numbers in lines that report timings are masked). A GGUF with only a vocabulary
(llama.cpp's models/ggml-vocab-*.gguf) is dumped without the full-load part.

Compare two dumps made from the same checkout: the Markdown files are part of the corpus (--markdown-root
<sdist>/vendor/llama.cpp gives a far larger one). A SmolLM2-135M dump takes about 5 s and 1 MB; Gemma 3 270M
has five times the vocabulary and many more special tokens (its dump is 5 MB).
"""

import argparse
import gzip
import json
from pathlib import Path

from cli_support import (
    CheckError,
    dump_compare_parser,
    existing_file,
    exit_with,
    gguf_file,
    run_handler,
    writable_output,
)
from dump_diff import DumpDiff
from library import reexec_with, resolve_lib_dir, verify_loaded

REPOSITORY = Path(__file__).resolve().parents[2]


def dump(args: argparse.Namespace) -> int:
    lib_dir = resolve_lib_dir(args.lib)
    model = str(Path(gguf_file(args.model)).resolve())  # absolute: the path shows in the dump and the log
    output = writable_output(args.output)
    if not Path(args.markdown_root).is_dir():
        raise CheckError(f"--markdown-root {args.markdown_root}: not a directory")
    reexec_with(lib_dir)
    # Imported only now: importing llama_cpp loads the engine, which must come from lib_dir.
    from vocabulary_dump import vocabulary_dump

    result = {"lib": str(lib_dir), **vocabulary_dump(model, args.markdown_root, args.quick)}
    verify_loaded(lib_dir)
    with gzip.open(output, "wt", encoding="utf-8") as f:
        json.dump(result, f)
    print(f"{lib_dir}: {output}: {summary(result)}")
    return 0


def compare(args: argparse.Namespace) -> int:
    a, b = load_dump(args.a), load_dump(args.b)
    for dumped in (a, b):
        dumped.pop("lib", None)  # which build made it: the one thing allowed to differ
    diff = DumpDiff()
    diff.walk(a, b)
    print(
        f"{args.a} vs {args.b}: {diff.compared} values compared, {diff.differences} differences ({summary(a)})"
    )
    return 1 if diff.differences else 0


def summary(dumped: dict[str, object]) -> str:
    logs = "+".join(
        str(size(dumped.get(key))) for key in ("log_vocab_only_load", "log_full_load", "log_context")
    )
    return f"n_vocab={dumped.get('n_vocab')}, texts={size(dumped.get('tokenize'))}, log lines={logs}"


def size(value: object) -> int:
    return len(value) if isinstance(value, list | dict) else 0


def load_dump(path: str) -> dict[str, object]:
    try:
        with gzip.open(existing_file(path, "dump"), "rt", encoding="utf-8") as f:
            dumped = json.load(f)
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckError(f"dump {path}: not a vocabulary dump ({error})") from None
    if not isinstance(dumped, dict) or "n_vocab" not in dumped:
        raise CheckError(f"dump {path}: not a vocabulary dump (no n_vocab)")
    return dumped


def parser() -> argparse.ArgumentParser:
    root, dumping = dump_compare_parser(
        __doc__, dump, compare, "what one build derives from a vocabulary", ".json.gz"
    )
    dumping.add_argument("--quick", action="store_true", help="tokenize only the first 5 Markdown files")
    dumping.add_argument("--markdown-root", default=str(REPOSITORY), help="where the *.md corpus is found")
    return root


if __name__ == "__main__":
    exit_with(lambda: run_handler(parser()))
