"""Proves that a llama.cpp build computes bitwise the logits another build computes (patches 0001, 0004, 0005).

    logits.py dump --lib DIR MODEL.gguf OUT.npz [--greedy] [--flash-attn enabled|disabled|auto]
    logits.py compare A.npz B.npz          exit 0: every array bitwise equal; 1: some differ

dump evaluates, with the llama.cpp build in DIR (a build's bin directory, or "installed" for the llama_cpp
package's own), fixed pseudo-random token sequences and saves every logits row:
  - prompts of 1, 5, 15, 16, 32, 60, 64 and 200 tokens in one sequence (logits of every position); those under
    64 tokens also as the first rows of a 64-row batch (arrays named ..._in64);
  - continuations of 16, 32, 48 and 60 tokens over a cached 300-token history, alone and as the first rows of a
    64-row batch;
  - 1, 2, 3, 4, 5, 7, 8, 13 and 16 sequences with prompts of their own in one batch (every position), then
    3 greedy decode steps of one token per sequence (every row).
compare A B holds build B to build A's results, A being stock: each array equal, except that a one-sequence
batch of 16 rows or more is compared with A's ..._in64 array (patch 0005: B computes such a batch with the tiled
kernel stock uses from 64 rows, so it must get what stock gives the same rows inside a 64-row batch).
--greedy also decodes 8 prompts greedily for 64 tokens, each alone and all 8 prompts in one batch, saves both
token lists and prints, per sequence, whether they agree. They need not: already in the stock engine, attention
over a unified KV cache that holds other sequences rounds differently, and the random-token continuations of
most sequences drift apart (SmolLM2: 0 of 8 agree, Gemma: 3 of 8, stock and patched alike). Its prompts are
5-12 tokens long, so that each prompt alone takes the same attention kernel in both builds. compare holds a patched build to
the stock build's tokens. (tests/integration/test_engine_build.py checks batch invariance with real prompts.)
The context is Cirrus's: n_ctx 4096, 16 sequences, n_batch = n_ubatch = 512, unified KV cache, 2 threads,
flash attention on unless --flash-attn says otherwise. A SmolLM2-135M dump takes about 15 s and 320 MB (with
--greedy); Gemma 3 270M's, with its 262,144-entry logits rows, is 1.7 GB.

compare checks the raw bits, so -0.0 against 0.0 or two NaN payloads count as differences.
"""

import argparse
import zipfile

import numpy as np
import numpy.typing as npt
from cli_support import (
    CheckError,
    dump_compare_parser,
    existing_file,
    exit_with,
    gguf_file,
    run_handler,
    writable_output,
)
from library import reexec_with, resolve_lib_dir, verify_loaded

IN_TILE = "_in64"  # logits_dump's suffix for rows evaluated as the first rows of a 64-row batch
ONE_SEQUENCE_TILED_FROM = 16


def dump(args: argparse.Namespace) -> int:
    lib_dir = resolve_lib_dir(args.lib)
    model = gguf_file(args.model)
    output = writable_output(args.output)
    reexec_with(lib_dir)
    # Imported only now: importing llama_cpp loads the engine, which must come from lib_dir.
    from batches import BatchSession, ContextShape
    from logits_dump import logits_arrays

    session = BatchSession(model, ContextShape(n_ctx=4096, flash_attn=args.flash_attn))
    verify_loaded(lib_dir)
    arrays = logits_arrays(session, args.greedy)
    with open(output, "wb") as f:
        np.savez(f, **arrays)  # type: ignore[arg-type]
    rows = sum(a.shape[0] for a in arrays.values() if a.dtype == np.float32)
    print(f"{lib_dir}: saved {len(arrays)} arrays, {rows} logits rows -> {output}")
    return 0


def compare(args: argparse.Namespace) -> int:
    a, b = load_dump(args.a), load_dump(args.b)
    if sorted(a) != sorted(b):
        print(f"different array sets: {sorted(set(a) ^ set(b))}")
        return 1
    different = [key for key in sorted(b) if not arrays_equal(key, a[reference_key(a, key)], b[key])]
    rows = sum(array.shape[0] for array in a.values() if array.dtype == np.float32)
    verdict = f"{len(different)} differ" if different else "all bitwise equal"
    print(f"compared {len(a)} arrays ({rows} logits rows): {verdict}")
    return 1 if different else 0


def reference_key(stock: dict[str, npt.NDArray[np.generic]], key: str) -> str:
    """Which of the stock dump's arrays the patched build's `key` must equal. Patch 0005 lets the tiled kernel take
    a one-sequence batch from 16 rows, so such a batch must get what stock computes for its rows as the first
    rows of a 64-row batch."""
    in_tile = key + IN_TILE
    return in_tile if in_tile in stock and first_rows(key) >= ONE_SEQUENCE_TILED_FROM else key


def first_rows(key: str) -> int:
    """prompt_31 -> 31, continue300_48 -> 48."""
    return int(key.rsplit("_", 1)[1])


def load_dump(path: str) -> dict[str, npt.NDArray[np.generic]]:
    if not zipfile.is_zipfile(existing_file(path, "dump")):
        raise CheckError(f"dump {path}: not a .npz file")
    try:
        with np.load(path) as arrays:
            return {key: arrays[key] for key in arrays.files}
    except (OSError, ValueError, zipfile.BadZipFile) as error:
        raise CheckError(f"dump {path}: unreadable ({error})") from None


def arrays_equal(key: str, x: npt.NDArray[np.generic], y: npt.NDArray[np.generic]) -> bool:
    """Bitwise equality; prints what differs."""
    if x.shape != y.shape or x.dtype != y.dtype:
        print(f"{key}: shape/dtype differ {x.shape}/{x.dtype} vs {y.shape}/{y.dtype}")
        return False
    if np.array_equal(x.view(np.uint8), y.view(np.uint8)):
        return True
    if x.dtype == np.float32:
        values = np.count_nonzero(x.view(np.uint32) != y.view(np.uint32))
        largest = np.nanmax(np.abs(x.astype(np.float64) - y.astype(np.float64)))
        print(f"{key}: DIFFERENT ({values} values, max abs diff {largest:.3g})")
    else:
        print(f"{key}: DIFFERENT")
    return False


def parser() -> argparse.ArgumentParser:
    root, dumping = dump_compare_parser(__doc__, dump, compare, "the logits one build computes", ".npz")
    dumping.add_argument("--greedy", action="store_true", help="also check greedy decoding alone vs batched")
    dumping.add_argument("--flash-attn", choices=("enabled", "disabled", "auto"), default="enabled")
    return root


if __name__ == "__main__":
    exit_with(lambda: run_handler(parser()))
