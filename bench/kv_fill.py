"""Decode speed of one stream on a fresh server and on one that served other conversations (issue 16).

Usage: .venv/bin/python -m bench.kv_fill [--model ID] [--fill 30] [--rounds 8] [--threads 2]
                                         [--wait-quiet SECONDS]

Per kind of server (Cirrus, then llama.cpp's own llama-server as bench/peers.py starts it: 8 slots, 8192 unified
KV cells), two servers run side by side: one is given `--fill` conversations of 200 tokens first, the other
nothing. Then, round by round, each answers one streamed greedy request of 128 tokens to a prompt never sent
before, the fresh server first, then the filled one (decode tokens/s: tokens after the first over the time from
the first to the last). Alternating, a machine whose speed drifts by 15% from one minute to the next (this one's)
shifts both alike, and the per-round ratio keeps what the filling costs: what a server keeps of earlier
conversations in its KV cache, and where it places their cells (attention in a unified cache spans every cell up
to the highest one in use). Last, a Cirrus server and a llama-server, both fresh, alternate the same way: the
ratio of their decode speeds, measured side by side.
"""

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `python bench/kv_fill.py` from the root

from bench.core import cirrus_server, cirrus_stream, request_body, resolve_config, wait_for_quiet
from bench.peers import llama_server

MEASURED_TOKENS = 128
FILL_TOKENS = 200
Decode = Callable[[int, int], float]  # (prompt number, max tokens) -> decode tokens/s


def prompt(number: int) -> str:
    """A ChatML turn (SmolLM2's template) whose first line no other number shares."""
    return (
        f"<|im_start|>user\nStory number {number}: write about a lighthouse keeper named Keeper{number} and the "
        "sea.<|im_end|>\n<|im_start|>assistant\n"
    )


def llama_server_decode(url: str) -> Decode:
    def decode(number: int, tokens: int) -> float:
        body = {"prompt": prompt(number), "n_predict": tokens, "temperature": 0, "stream": True}
        stamps: list[float] = []
        headers = {"Connection": "close"}
        with httpx.stream("POST", f"{url}/completion", json=body, timeout=300, headers=headers) as response:
            for line in response.iter_lines():
                if line.startswith("data: ") and json.loads(line[6:]).get("content"):
                    stamps.append(time.perf_counter())
        return (len(stamps) - 1) / (stamps[-1] - stamps[0])

    return decode


def cirrus_decode(client: httpx.Client, model: str) -> Decode:
    def decode(number: int, tokens: int) -> float:
        return cirrus_stream(client, model, request_body(prompt(number), tokens)).decode_tps

    return decode


def alternated(fresh: Decode, filled: Decode, fill: int, rounds: int) -> tuple[list[float], list[float]]:
    fresh(0, 8)  # the cold starts
    filled(0, 8)
    for n in range(fill):
        filled(1000 + n, FILL_TOKENS)
    pairs = [(fresh(100 + n, MEASURED_TOKENS), filled(100 + n, MEASURED_TOKENS)) for n in range(rounds)]
    return [pair[0] for pair in pairs], [pair[1] for pair in pairs]


def lines(name: str, fresh: list[float], filled: list[float], fill: int) -> list[str]:
    def shown(samples: list[float]) -> str:
        return f"median {statistics.median(samples):6.1f} [{' '.join(f'{s:.0f}' for s in samples)}]"

    ratios = [after / before for before, after in zip(fresh, filled, strict=True)]
    return [
        f"  {name:<13} fresh                     {shown(fresh)}",
        f"  {'':<13} after {fill:>3} conversations     {shown(filled)}",
        f"  {'':<13} filled / fresh, per round   median {statistics.median(ratios):.3f}"
        f" [{' '.join(f'{r:.2f}' for r in ratios)}]",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="@cf/huggingface/smollm2-135m-instruct")
    parser.add_argument("--fill", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--wait-quiet", type=float, default=60.0, metavar="SECONDS")
    args = parser.parse_args(argv)
    config = resolve_config(argparse.Namespace(model=args.model, threads=args.threads, max_tokens=0, runs=0))
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; model {args.model}")
    print(f"quiet: {wait_for_quiet(args.wait_quiet)}", flush=True)
    rows: list[str] = []
    with open("/dev/null", "w") as log:
        with cirrus_server(args.threads, log) as fresh, cirrus_server(args.threads, log) as filled:
            decodes = cirrus_decode(fresh, args.model), cirrus_decode(filled, args.model)
            rows += lines("Cirrus", *alternated(*decodes, args.fill, args.rounds), args.fill)
        with llama_server(config, log) as fresh_url, llama_server(config, log) as filled_url:
            decodes = llama_server_decode(fresh_url), llama_server_decode(filled_url)
            rows += lines("llama-server", *alternated(*decodes, args.fill, args.rounds), args.fill)
        with cirrus_server(args.threads, log) as client, llama_server(config, log) as url:
            cirrus, peer = alternated(
                cirrus_decode(client, args.model), llama_server_decode(url), 0, args.rounds
            )
        ratios = [ours / theirs for ours, theirs in zip(cirrus, peer, strict=True)]
        rows += [
            f"  Cirrus / llama-server, both fresh, per round: median {statistics.median(ratios):.3f}"
            f" [{' '.join(f'{r:.2f}' for r in ratios)}] (Cirrus {statistics.median(cirrus):.1f},"
            f" llama-server {statistics.median(peer):.1f} tokens/s)"
        ]
    print(f"decode tokens/s of one stream of {MEASURED_TOKENS} tokens, {args.rounds} rounds:")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
