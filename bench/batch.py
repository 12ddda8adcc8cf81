"""Batch benchmark: what a running batch costs interactive requests (issue 14).

Usage: .venv/bin/python -m bench.batch [--items 1000] [--callers 2] [--requests 48] [--max-tokens 32]
                                       [--batch-concurrency 4] [--threads N] [--wait-quiet SECONDS]

One server, SmolLM2. First the interactive load alone: `callers` closed-loop callers, `requests` streamed chat
requests in all. Then a batch of `items` requests is queued on the same model, and once it runs the same
interactive load is measured again. Printed: TTFT p50 / p99 of both, their ratio (target: p99 within 1.5x), how
long interactive requests waited for a slot (the server's `queue_s`) against the decode step the batch's
sequences run at, the preemptions the pool made, and how far the batch got.
"""

import argparse
import json
import re
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `python bench/batch.py` from the root

from bench.core import Stream, cirrus_server, cirrus_stream, wait_for_quiet

MODEL = "@cf/huggingface/smollm2-135m-instruct"
QUESTIONS = ("Name a city in Spain.", "What is two plus two?", "Say hi politely.", "Name a fruit.")
TOPICS = ("rivers", "stars", "bread", "trains", "clouds", "music", "paper", "glass", "salt", "maps")


def interactive_body(index: int, max_tokens: int) -> dict[str, Any]:
    question = f"{QUESTIONS[index % len(QUESTIONS)]} (request {index})"  # no response-cache hits
    return {"messages": [{"role": "user", "content": question}], "max_tokens": max_tokens, "stream": True}


def batch_items(count: int, max_tokens: int) -> list[dict[str, Any]]:
    return [
        {
            "prompt": f"Write two sentences about {TOPICS[n % len(TOPICS)]}, number {n}.",
            "max_tokens": max_tokens,
        }
        for n in range(count)
    ]


def interactive_load(client: httpx.Client, callers: int, requests: int, max_tokens: int) -> list[Stream]:
    with ThreadPoolExecutor(callers) as pool:
        streams = pool.map(
            lambda i: cirrus_stream(client, MODEL, interactive_body(i, max_tokens)), range(requests)
        )
        return list(streams)


def queue_batch(client: httpx.Client, items: list[dict[str, Any]]) -> str:
    answer = client.post(f"/ai/run/{MODEL}?queueRequest=true", json={"requests": items}).json()
    request_id: str = answer["result"]["request_id"]
    return request_id


def progress(client: httpx.Client, request_id: str) -> dict[str, Any]:
    result: dict[str, Any] = client.post(
        f"/ai/run/{MODEL}?queueRequest=true", json={"request_id": request_id}
    ).json()["result"]
    return result


def wait_running(client: httpx.Client, request_id: str, min_done: int, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while progress(client, request_id).get("done", 0) < min_done:
        if time.monotonic() > deadline:
            raise RuntimeError("the batch did not start")
        time.sleep(0.2)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def queue_waits(log_path: Path, since: int) -> list[float]:
    """The `queue_s` of the interactive requests in the server's access log after byte `since` (batch items
    write no access log line)."""
    with log_path.open("rb") as log:
        log.seek(since)
        lines = log.read().decode("utf-8", "replace").splitlines()
    waits = []
    for line in lines:
        if '"queue_s"' in line and '"model"' in line:
            record = json.loads(line)
            waits.append(float(record["queue_s"]))
    return waits


def preemptions(log_path: Path) -> int:
    return len(re.findall("preempted background work", log_path.read_text("utf-8", "replace")))


def summary(name: str, streams: list[Stream]) -> str:
    ttfts = [s.ttft_s * 1000 for s in streams]
    steps = [1000 / s.decode_tps for s in streams if s.decode_tps == s.decode_tps]
    return (
        f"{name:28} TTFT p50 {statistics.median(ttfts):7.1f} ms  p99 {percentile(ttfts, 0.99):7.1f} ms  "
        f"decode step p50 {statistics.median(steps):6.1f} ms  ({len(streams)} requests)"
    )


def run(args: argparse.Namespace, log: IO[str], log_path: Path) -> None:
    with cirrus_server(args.threads, log, batch_concurrency=str(args.batch_concurrency)) as client:
        interactive_load(client, args.callers, args.callers, 4)  # cold start and warm-up
        print(f"quiet: {wait_for_quiet(args.wait_quiet)}")
        alone = interactive_load(client, args.callers, args.requests, args.max_tokens)
        request_id = queue_batch(client, batch_items(args.items, args.max_tokens))
        wait_running(client, request_id, min_done=8)
        log.flush()
        since = log_path.stat().st_size
        before = progress(client, request_id)
        started = time.perf_counter()
        beside = interactive_load(client, args.callers, args.requests, args.max_tokens)
        elapsed = time.perf_counter() - started
        after = progress(client, request_id)
        log.flush()
        report(
            args, alone, beside, queue_waits(log_path, since), preemptions(log_path), before, after, elapsed
        )


def report(
    args: argparse.Namespace,
    alone: list[Stream],
    beside: list[Stream],
    waits: list[float],
    preempted: int,
    before: dict[str, Any],
    after: dict[str, Any],
    elapsed: float,
) -> None:
    print(summary("interactive alone", alone))
    print(summary(f"beside a {args.items}-item batch", beside))
    ratio = percentile([s.ttft_s for s in beside], 0.99) / percentile([s.ttft_s for s in alone], 0.99)
    step_ms = statistics.median(1000 / s.decode_tps for s in beside)
    waits_ms = [w * 1000 for w in waits]
    if waits_ms:
        print(
            f"slot wait beside the batch (server queue_s, {len(waits_ms)} requests): p50 "
            f"{statistics.median(waits_ms):.1f} ms, p99 {percentile(waits_ms, 0.99):.1f} ms, max {max(waits_ms):.1f} ms; "
            f"decode step {step_ms:.1f} ms"
        )
    done = int(after.get("done", after.get("total", 0))) - int(before.get("done", 0))
    print(f"preemptions: {preempted}; batch items finished during the load: {done} in {elapsed:.1f} s")
    verdict = "PASS" if ratio <= 1.5 else "FAIL"
    print(f"TTFT p99 beside the batch <= 1.5x alone: {ratio:.2f}x  {verdict}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--callers", type=int, default=2)
    parser.add_argument("--requests", type=int, default=48)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--batch-concurrency", type=int, default=4, help="items the gateway runs at once (8 fills every slot)"
    )
    parser.add_argument("--wait-quiet", type=float, default=60.0)
    args = parser.parse_args()
    log_path = Path("/tmp") / f"cirrus-bench-batch-{int(time.time())}.log"
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; server log: {log_path}")
    with log_path.open("w") as log:
        run(args, log, log_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
