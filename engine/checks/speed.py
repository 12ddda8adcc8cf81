"""Measures how fast llama.cpp builds run, back to back: batched decoding and prompts (patch 0001), and model
loading (patch 0002). Prints a table of medians; it proves nothing about results (logits.py, vocabulary.py).

    speed.py batch MODEL.gguf NAME=DIR [NAME=DIR ...] [--rounds 3]
    speed.py load MODEL.gguf NAME=DIR [NAME=DIR ...] [--rounds 7] [--n-ctx 2048] [--json]

DIR is a llama.cpp build's bin directory, or "installed" for the llama_cpp package's own. Each round runs one
fresh worker process (speed_worker.py) per build, in the order given, so that the builds alternate.
batch: 2 threads, n_ctx 8192, 16 sequences, n_batch = n_ubatch = 512, unified KV cache, flash attention. A
decode step of batch B decodes one token in each of B sequences that hold a 60-token prompt (12 steps after 2
warm-up steps); a prompt is one 64- or 512-token chunk in a fresh sequence. About 10 s per worker for SmolLM2.
load: each worker (a cold start, with the file in the page cache) times a vocab-only load, a second vocab-only
load in the same process, a full load (use_mmap) and llama_init_from_model with n_ctx; wall time and, as
"(cpu)", the loading thread's CPU time, which other processes disturb less. About 1 s per worker.
With two builds the last column is the first's median over the second's (above 1: the second is faster).
The machine is shared: run it under flock /tmp/cirrus-cpu.lock, and compare ratios rather than absolute times.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from cli_support import INSTALLED, CheckError, exit_with, gguf_file
from library import library_env, resolve_lib_dir

WORKER = Path(__file__).with_name("speed_worker.py")
WORKER_TIMEOUT_S = 600
BATCH_CASES = [(f"decode{b}", f"decode batch {b}", b) for b in (1, 2, 4, 8, 16)] + [
    (f"prompt{n}", f"prompt {n} tokens", n) for n in (64, 512)
]
LOAD_CASES = ["vocab_only", "vocab_only_2nd", "full", "init_from_model"]

Samples = dict[str, list[float]]


def builds(pairs: list[str]) -> dict[str, Path]:
    """NAME=DIR arguments as names to checked build directories."""
    found: dict[str, Path] = {}
    for pair in pairs:
        name, separator, directory = pair.partition("=")
        if not separator or not name or not directory:
            raise CheckError(
                f"{pair!r}: give builds as NAME=DIR, e.g. stock=/path/build/bin or new={INSTALLED}"
            )
        if name in found:
            raise CheckError(f"build name {name!r} given twice")
        found[name] = resolve_lib_dir(directory)
    return found


def measure(args: argparse.Namespace) -> dict[str, Samples]:
    """Every build's samples over all rounds, each round running the builds in the order given."""
    model = gguf_file(args.model)
    lib_dirs = builds(args.builds)
    samples: dict[str, Samples] = {name: {} for name in lib_dirs}
    for _ in range(args.rounds):
        for name, lib_dir in lib_dirs.items():
            for case, values in run_worker(args.kind, model, lib_dir, args.n_ctx).items():
                samples[name].setdefault(case, []).extend(values)
    return samples


def run_worker(kind: str, model: str, lib_dir: Path, n_ctx: int) -> Samples:
    command = [sys.executable, str(WORKER), kind, model, "--n-ctx", str(n_ctx)]
    env = library_env(lib_dir, os.environ)
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise CheckError(f"the {kind} worker for {lib_dir} ran past {WORKER_TIMEOUT_S} s") from None
    if done.returncode != 0:
        raise CheckError(f"the {kind} worker for {lib_dir} failed: {done.stderr.strip()[-500:]}")
    samples: Samples = json.loads(done.stdout.strip().splitlines()[-1])
    return samples


def batch_table(samples: dict[str, Samples]) -> list[str]:
    names = list(samples)
    lines = [f"{'case':<22}" + "".join(f"{name:>26}" for name in names) + ratio_header(names)]
    for case, label, tokens in BATCH_CASES:
        medians = [statistics.median(samples[name][case]) for name in names]
        cells = "".join(f"{m * 1e3:>10.2f} ms {tokens / m:>7.0f} tok/s" for m in medians)
        lines.append(f"{label:<22}{cells}{ratio(medians)}")
    return lines


def load_table(samples: dict[str, Samples]) -> list[str]:
    names = list(samples)
    lines = [f"{'case':<22}" + "".join(f"{name:>34}" for name in names) + ratio_header(names)]
    for case in [c for base in LOAD_CASES for c in (base, f"{base} (cpu)") if c in samples[names[0]]]:
        values = [samples[name][case] for name in names]
        cells = "".join(
            f"{statistics.median(v) * 1e3:>9.1f} ms ({min(v) * 1e3:.1f}-{max(v) * 1e3:.1f}, n={len(v)})".rjust(
                34
            )
            for v in values
        )
        lines.append(f"{case:<22}{cells}{ratio([statistics.median(v) for v in values])}")
    return lines


def ratio_header(names: list[str]) -> str:
    return f"{'ratio':>9}" if len(names) == 2 else ""


def ratio(medians: list[float]) -> str:
    return f"{medians[0] / medians[1]:>8.2f}x" if len(medians) == 2 else ""


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root.add_argument("kind", choices=("batch", "load"), help="what to measure")
    root.add_argument("model", metavar="MODEL.gguf")
    root.add_argument(
        "builds", nargs="+", metavar="NAME=DIR", help=f"a build's bin directory or '{INSTALLED}'"
    )
    root.add_argument("--rounds", type=positive, help="worker runs per build (default: batch 3, load 7)")
    root.add_argument("--n-ctx", type=positive, default=2048, help="load: the context created (default 2048)")
    root.add_argument("--json", action="store_true", help="also print every sample, in seconds, as JSON")
    return root


def positive(text: str) -> int:
    value = int(text) if text.isdigit() else 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


def main() -> int:
    args = parser().parse_args()
    args.rounds = args.rounds or (3 if args.kind == "batch" else 7)
    samples = measure(args)
    table = batch_table(samples) if args.kind == "batch" else load_table(samples)
    print("\n".join(table))
    if args.json:
        print(json.dumps(samples))
    return 0


if __name__ == "__main__":
    exit_with(main)
