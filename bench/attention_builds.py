"""Prefill and decode of llama.cpp builds side by side, in-process: what a change to the engine's attention does.

Usage: .venv/bin/python -m bench.attention_builds NAME=DIR NAME=DIR [...] [--rounds 4] [--model ID]
                                                 [--wait-quiet SECONDS]

DIR is a llama.cpp build's bin directory (engine/README.md, "Changing a patch") or "installed" for the engine
the bootstrap installed. Each round runs one fresh process per build, the builds alternating (reversed every
other round), so the drift of a shared machine shifts them alike. Each process loads the model as the catalog
runs SmolLM2 (`bench.kv_span.Probe`: 8,192 unified cells) and times, in ms:

- a continuation: n new tokens evaluated over a cached history of 300, 700 or 1,500 tokens (what a later turn
  of a conversation costs), for n from 16 to 60, below the 64 rows from which ggml's CPU flash attention tiles;
- fresh prompts of 100 and 512 tokens, and 100 new tokens over 700 (tiled, with a short last tile per head);
- a decode step of 8 sequences over 700-token histories and of 16 over 400 (16 rows of different sequences);
- a decode step of one sequence over 100 and 700 tokens, alone in the cache and behind 400 or 2,048 cells of idle
  conversations (what a single stream costs while the prefix cache keeps other conversations).

Prints each case's median per build and the first build's time over each other's (above 1: the other is faster),
as the median of the per-round ratios.
"""

import argparse
import json
import os
import statistics
import sys
from functools import partial
from pathlib import Path

# `python bench/attention_builds.py` from the root
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.core import cpu_model, load_average, resolve_config, wait_for_quiet
from bench.kv_span import Figures, Probe, child_figures, hold_idle, timed_ms, tokens
from cirrus.catalog import DEFAULT_MODEL

HISTORIES = (300, 700, 1500)
NEW_TOKENS = (16, 24, 32, 48, 60)


def cases(probe: Probe) -> Figures:
    figures: Figures = {}
    history = tokens(max(HISTORIES), 1)
    for cached in HISTORIES:
        for new in NEW_TOKENS:
            probe.clear()
            probe.evaluate(1, 0, history[:cached])
            figures[f"{new} new over {cached}"] = timed_ms(partial(probe.evaluate, 1, cached, tokens(new, 9)))
    for size in (100, 512):
        probe.clear()
        figures[f"fresh {size}"] = timed_ms(partial(probe.evaluate, 0, 0, tokens(size, 3)))
    probe.clear()
    probe.evaluate(1, 0, history[:700])
    figures["100 new over 700"] = timed_ms(partial(probe.evaluate, 1, 700, tokens(100, 9)))
    for count, cached in ((8, 700), (16, 400)):
        probe.clear()
        for sequence in range(count):
            probe.evaluate(sequence, 0, tokens(cached, sequence))
        figures[f"decode batch {count} over {cached}, per step"] = probe.decode_ms(
            list(range(count)), cached, 8
        )
    for cached, idle in ((100, 0), (100, 400), (700, 0), (700, 2048)):
        probe.clear()
        hold_idle(probe, idle)
        probe.evaluate(1, 0, history[:cached])
        figures[f"decode alone over {cached}, {idle} idle, per step"] = probe.decode_ms([1], cached, 16)
    return figures


def measure(build: str, path: str, threads: int) -> Figures:
    command = [
        sys.executable,
        "-m",
        "bench.attention_builds",
        "--child",
        "--path",
        path,
        "--threads",
        str(threads),
    ]
    env = dict(os.environ)
    # llama-cpp-python loads libllama from LLAMA_CPP_LIB_PATH; the libraries it links find each other by RUNPATH
    if build != "installed":
        env.update(LLAMA_CPP_LIB_PATH=build, LD_LIBRARY_PATH=build)
    return child_figures(command, env)


def report(names: list[str], runs: dict[str, list[Figures]]) -> list[str]:
    header = f"{'case (ms)':36s}" + "".join(f"{name:>12s}" for name in names)
    lines = [header + "".join(f"{names[0] + '/' + name:>18s}" for name in names[1:])]
    for case in runs[names[0]][0]:
        medians = "".join(f"{statistics.median(run[case] for run in runs[name]):12.1f}" for name in names)
        ratios = "".join(
            f"{statistics.median(a[case] / b[case] for a, b in zip(runs[names[0]], runs[name], strict=True)):17.2f}x"
            for name in names[1:]
        )
        lines.append(f"{case:36s}{medians}{ratios}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("builds", nargs="*", metavar="NAME=DIR")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(cases(Probe(args.path, args.threads))))
        return 0
    builds = dict(build.split("=", 1) for build in args.builds)
    if len(builds) < 2:
        parser.error("give at least two builds, as NAME=DIR")
    config = resolve_config(argparse.Namespace(model=args.model, threads=args.threads, max_tokens=0, runs=0))
    path = str(config.path)
    print(f"machine: {cpu_model()}; model: {config.path.name}, {args.threads} threads; load {load_average()}")
    print(wait_for_quiet(args.wait_quiet))
    names = list(builds)
    runs: dict[str, list[Figures]] = {name: [] for name in names}
    for round_number in range(args.rounds):
        order = names if round_number % 2 == 0 else names[::-1]
        for name in order:
            runs[name].append(measure(builds[name], path, args.threads))
    print("\n".join(report(names, runs)))
    print(f"load average after: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
