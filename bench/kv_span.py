"""What a later turn's prefill and decode cost in llama.cpp, in-process, by what the KV cache holds (issue 16).

Usage: .venv/bin/python -m bench.kv_span [--model ID] [--rounds 3] [--threads 2] [--wait-quiet SECONDS]

Cirrus's own `LlamaModel` (8,192 unified cells, 24 sequence ids, as the catalog runs SmolLM2), no server. Each
round runs every case in a fresh process, the cases alternating, so the drift of a shared machine shifts them
alike; medians over rounds, in ms. Three questions:

- idle cells: a 700-token conversation's 60-token continuation (prefill) and its decode, with 0, 768 or 2,048
  cells of other, idle conversations in the cache. Attention spans every cell in use, so idle cells cost every
  step; this prices the prefix cache's cap on them (`runtime.prefix_cache.idle_token_budget`).
- continuation size: n new tokens evaluated over a cached history of 300, 700 or 1,500 tokens, as they are and
  padded to 64 rows by evaluating the last cached tokens again. ggml's CPU flash attention takes its tiled kernel
  only from 64 query rows (GGML_FA_TILE_Q); below that each row walks every cell on its own.
- flash attention on (what Cirrus runs) against off: fresh prompts, a continuation, decode alone and in a batch
  of 8, and the process's peak resident memory.
"""

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `python bench/kv_span.py` from the root

from bench.core import cpu_model, load_average, resolve_config, wait_for_quiet
from cirrus.catalog import DEFAULT_MODEL
from cirrus.runtime.llama import ContextShape, LlamaModel

KV_CELLS = 8192
SEQUENCES = 24
TILE_ROWS = 64
IDLE_CELLS = (0, 768, 2048)
NEW_TOKENS = (24, 32, 40, 48, 56, 60)
HISTORIES = (300, 700, 1500)
CASES = ("idle", "continuation", "flash-on", "flash-off")
Figures = dict[str, float]


def tokens(count: int, seed: int) -> list[int]:
    """Distinct ordinary token ids (SmolLM2's vocabulary is 49,152), no two sequences alike."""
    return [(i * 7919 + seed * 104729) % 40000 + 100 for i in range(count)]


class Probe:
    def __init__(self, path: str, threads: int, flash: bool = True) -> None:
        self.model = LlamaModel(path, ContextShape(KV_CELLS, SEQUENCES, threads, flash_attention=flash))
        self.batch = self.model.batch_tokens

    def evaluate(self, sequence: int, start: int, ids: list[int]) -> None:
        for offset in range(0, len(ids), self.batch):
            chunk = ids[offset : offset + self.batch]
            last = len(chunk) - 1
            self.model.decode([(t, start + offset + i, sequence, i == last) for i, t in enumerate(chunk)])

    def decode_ms(self, sequences: list[int], start: int, steps: int) -> float:
        """Per step: one token for each of `sequences`, all at position `start` onwards."""
        began = time.perf_counter()
        for step in range(steps):
            self.model.decode([(5, start + step, s, True) for s in sequences])
        return (time.perf_counter() - began) * 1e3 / steps

    def clear(self) -> None:
        for sequence in range(SEQUENCES):
            self.model.forget(sequence, 0)


def timed_ms(action: Callable[[], None]) -> float:
    began = time.perf_counter()
    action()
    return (time.perf_counter() - began) * 1e3


def hold_idle(probe: Probe, cells: int) -> None:
    """Fill `cells` KV cells with idle conversations of up to 700 tokens (sequences 2, 3, ...), as the prefix cache
    keeps them; a sequence evaluated after them lies in the cells past theirs."""
    for number, left in enumerate(range(cells, 0, -700)):
        probe.evaluate(2 + number, 0, tokens(min(700, left), 2 + number))


def idle_case(probe: Probe) -> Figures:
    figures: Figures = {}
    for idle in IDLE_CELLS:
        probe.clear()
        hold_idle(probe, idle)
        probe.evaluate(1, 0, tokens(700, 1))
        figures[f"60 new over 700, {idle} idle: prefill"] = timed_ms(
            lambda: probe.evaluate(1, 700, tokens(60, 9))
        )
        figures[f"60 new over 700, {idle} idle: decode/token"] = probe.decode_ms([1], 760, 32)
    return figures


def continuation_case(probe: Probe) -> Figures:
    figures: Figures = {}
    history = tokens(max(HISTORIES) + TILE_ROWS, 1)
    for cached in HISTORIES:
        for new in NEW_TOKENS:
            for padded in (False, True):
                probe.clear()
                probe.evaluate(1, 0, history[:cached])
                start = cached - (TILE_ROWS - new) if padded else cached
                probe.model.forget(1, start)
                rows = history[start:cached] + tokens(new, 9)
                label = f"{new} new over {cached}{' padded to 64' if padded else ''}"
                figures[label] = timed_ms(partial(probe.evaluate, 1, start, rows))
    return figures


def flash_case(probe: Probe) -> Figures:
    figures: Figures = {}
    probe.clear()
    figures["fresh 100: prefill"] = timed_ms(lambda: probe.evaluate(0, 0, tokens(100, 0)))
    figures["decode c=1 at 100/token"] = probe.decode_ms([0], 100, 32)
    probe.clear()
    figures["fresh 512: prefill"] = timed_ms(lambda: probe.evaluate(0, 0, tokens(512, 0)))
    probe.clear()
    probe.evaluate(1, 0, tokens(700, 1))
    figures["60 new over 700: prefill"] = timed_ms(lambda: probe.evaluate(1, 700, tokens(60, 9)))
    figures["decode c=1 at 760/token"] = probe.decode_ms([1], 760, 32)
    probe.clear()
    for sequence in range(8):
        probe.evaluate(sequence, 0, tokens(700, sequence))
    figures["decode batch 8 at 700/step"] = probe.decode_ms(list(range(8)), 700, 8)
    figures["peak RSS MB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return figures


def child(case: str, path: str, threads: int) -> None:
    probe = Probe(path, threads, flash=case != "flash-off")
    run = {"idle": idle_case, "continuation": continuation_case}.get(case, flash_case)
    print(json.dumps(run(probe)))


def measure(case: str, path: str, threads: int) -> Figures:
    command = [
        sys.executable,
        "-m",
        "bench.kv_span",
        "--child",
        case,
        "--path",
        path,
        "--threads",
        str(threads),
    ]
    return child_figures(command)


def child_figures(command: list[str], env: dict[str, str] | None = None) -> Figures:
    """Run a child that prints its figures as JSON on its last line."""
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=True)
    figures: Figures = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def report(rounds: list[dict[str, Figures]]) -> list[str]:
    lines = []
    for case in CASES:
        lines.append(f"== {case} (median of {len(rounds)} rounds)")
        for label in rounds[0][case]:
            values = [round_[case][label] for round_ in rounds]
            lines.append(
                f"  {label:44} {statistics.median(values):8.1f}   [{min(values):.1f}-{max(values):.1f}]"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="a catalog model id")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS")
    parser.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.path, args.threads)
        return 0
    config = resolve_config(
        argparse.Namespace(model=args.model, threads=args.threads, max_tokens=0, runs=args.rounds)
    )
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; machine: {cpu_model()}")
    print(
        f"model: {config.path.name}, {args.threads} threads, {KV_CELLS} unified cells; load {load_average()}"
    )
    print(wait_for_quiet(args.wait_quiet))
    rounds = [
        {case: measure(case, str(config.path), args.threads) for case in CASES} for _ in range(args.rounds)
    ]
    print("\n".join(report(rounds)))
    print(f"load average after: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
