"""LoRA benchmark: what serving fine-tunes on a shared base model costs (issue 14).

Usage: .venv/bin/python -m bench.lora [--requests 48] [--concurrency 8] [--max-tokens 64] [--threads N]
                                      [--wait-quiet SECONDS]

One server, SmolLM2, four LoRA adapters trained on this machine by the tests' recipe (tests/integration/lora.py;
cached after the first run) and uploaded as fine-tunes. The same closed-loop load (`concurrency` callers,
`requests` streamed chat requests of `max-tokens` greedy tokens) runs four times:
- no LoRA at all, before any adapter is loaded;
- 0 adapters in the mix: the same requests after every adapter has been loaded into the instance;
- 1 adapter: every request names the same fine-tune;
- 4 adapters: requests name the four fine-tunes in turn, two callers each.
llama.cpp applies adapters per context, so sequences of different adapters decode in different steps: printed
are aggregate tokens/s, TTFT p50 / p99 and each case's throughput against no LoRA.
"""

import argparse
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `python bench/lora.py` from the root

from tests.integration.lora import STYLES, LoraAdapter, cached_adapter

from bench.core import Stream, cirrus_server, cirrus_stream, wait_for_quiet

MODEL = "@cf/huggingface/smollm2-135m-instruct"
QUESTIONS = (
    "Tell me about the ocean.",
    "How do trains work?",
    "Describe a forest in autumn.",
    "What makes bread rise?",
)


def create_finetune(client: httpx.Client, adapter: LoraAdapter) -> str:
    created = client.post("/ai/finetunes", json={"model": MODEL, "name": f"bench-{adapter.style}"})
    created.raise_for_status()
    finetune_id: str = created.json()["result"]["id"]
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        content = (adapter.peft_dir / name).read_bytes()
        uploaded = client.post(
            f"/ai/finetunes/{finetune_id}/finetune-assets",
            data={"file_name": name},
            files={"file": (name, content)},
        )
        uploaded.raise_for_status()
    return finetune_id


def body(index: int, max_tokens: int, lora: str | None) -> dict[str, Any]:
    question = f"{QUESTIONS[index % len(QUESTIONS)]} (request {index})"  # no response-cache hits
    request: dict[str, Any] = {
        "messages": [{"role": "user", "content": question}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
    }
    if lora is not None:
        request["lora"] = lora
    return request


def load(
    client: httpx.Client, args: argparse.Namespace, loras: list[str | None]
) -> tuple[list[Stream], float]:
    """`requests` streams from `concurrency` callers; request i names loras[i % len(loras)]."""

    def one(index: int) -> Stream:
        return cirrus_stream(client, MODEL, body(index, args.max_tokens, loras[index % len(loras)]))

    started = time.perf_counter()
    with ThreadPoolExecutor(args.concurrency) as pool:
        streams = list(pool.map(one, range(args.requests)))
    return streams, time.perf_counter() - started


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def line(name: str, streams: list[Stream], elapsed: float, baseline_tps: float | None) -> tuple[str, float]:
    tps = sum(s.completion_tokens for s in streams) / elapsed
    ttfts = [s.ttft_s * 1000 for s in streams]
    against = f"  {tps / baseline_tps:5.2f}x no LoRA" if baseline_tps else ""
    text = (
        f"{name:26} {tps:7.1f} tokens/s  TTFT p50 {statistics.median(ttfts):7.1f} ms  "
        f"p99 {percentile(ttfts, 0.99):7.1f} ms{against}"
    )
    return text, tps


def run(args: argparse.Namespace, log: IO[str]) -> None:
    adapters = [cached_adapter(style) for style in STYLES]  # trained (or read from the cache) before timing
    with cirrus_server(args.threads, log) as client:
        load(client, argparse.Namespace(**{**vars(args), "requests": args.concurrency}), [None])  # cold start
        ids = [create_finetune(client, adapter) for adapter in adapters]
        print(f"quiet: {wait_for_quiet(args.wait_quiet)}")
        text, baseline = line("no LoRA", *load(client, args, [None]), None)
        print(text)
        warm = argparse.Namespace(**{**vars(args), "requests": len(ids)})
        load(client, warm, list(ids))  # every adapter loaded into the instance
        cases: list[tuple[str, list[str | None]]] = [
            ("0 adapters in the mix", [None]),
            ("1 adapter", [ids[0]]),
            ("4 adapters", list(ids)),
        ]
        for name, loras in cases:
            print(line(name, *load(client, args, loras), baseline)[0])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=48)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--wait-quiet", type=float, default=60.0)
    args = parser.parse_args()
    log_path = Path("/tmp") / f"cirrus-bench-lora-{int(time.time())}.log"
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; server log: {log_path}")
    with log_path.open("w") as log:
        run(args, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
