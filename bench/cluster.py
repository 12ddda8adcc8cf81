"""The Ray path's cost (issue 11): single-node Cirrus against a one-node Ray cluster on the same machine.

Single node: `cirrus serve`. Cluster: a Ray head offering `{"cirrus": 1}` (its node agent runs the node's pool)
and a gateway, `cirrus serve --cluster ADDRESS`, in front of it. Each side is started fresh in each round (the
order reversed every other round), warmed, then measured while the other is stopped: TTFT over sequential
streaming chat requests, and aggregate completion tokens/s of a closed loop at concurrency 8.

Usage: .venv/bin/python -m bench.cluster [--rounds N] [--requests N] [--load-requests N] [--threads N]
                                         [--wait-quiet SECONDS]
Run it under `flock /tmp/cirrus-heavy.lock`: it needs the machine to itself.
"""

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

import httpx
from tests.services.ray_cluster import DIR_PREFIX, NODE_IP, RAY_ENV, RayCluster

from bench.core import REQUEST_TIMEOUT_S, free_port, load_average, stop_server, verdict, wait_ready
from bench.serving import (
    CIRRUS,
    ROOT,
    SPARE_SETTLE_S,
    WARM_UP_TOKENS,
    Api,
    Phases,
    Reply,
    async_client,
    closed_loop,
    frozen_source,
    git_head,
    progress,
    request_prompt,
    source_digest,
    stream_one,
    watched,
)
from cirrus.catalog import DEFAULT_MODEL

SINGLE, CLUSTER = "single node", "Ray, one node"
NODE_HEADER = "x-cirrus-node"
CONCURRENCY = 8
TTFT_TOKENS, LOAD_TOKENS = 8, 64
TARGET_TTFT_OVERHEAD_MS, TARGET_TPS_RATIO = 15.0, 0.9
NODE_JOIN_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Plan:
    rounds: int
    requests: int  # sequential TTFT requests per side per round
    load_requests: int  # closed-loop requests at CONCURRENCY per side per round
    threads: int
    wait_quiet_s: float


@dataclass(frozen=True)
class Run:
    """One side measured in one round."""

    side: str
    ttft_s: list[float]
    tokens_per_s: float

    def ttft_ms(self, percent: int) -> float:
        return 1000 * statistics.quantiles(self.ttft_s, n=100, method="inclusive")[percent - 1]


# -- the two sides -----------------------------------------------------------------------------------------------


def state_env(folder: Path, threads: int) -> dict[str, str]:
    """A state and cache dir of its own, and the same thread count, for either side's serving process."""
    dirs = {"CIRRUS_STATE_DIR": folder / "state", "CIRRUS_CACHE_DIR": folder / "cache"}
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    return {**{key: str(path) for key, path in dirs.items()}, "CIRRUS_THREADS": str(threads)}


@contextmanager
def cirrus_serve(env: Mapping[str, str], log: IO[str], *args: str) -> Iterator[str]:
    port = free_port()
    environment = {**os.environ, "CIRRUS_REQUEST_TIMEOUT_S": f"{REQUEST_TIMEOUT_S:g}", **env}
    command = [sys.executable, "-m", "cirrus.cli", "serve", "--host", "127.0.0.1", "--port", str(port), *args]
    server = subprocess.Popen(command, env=environment, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            wait_ready(client, server)
        yield url
    finally:
        stop_server(server)


@contextmanager
def single_node(root: Path, threads: int, log: IO[str]) -> Iterator[str]:
    with cirrus_serve(state_env(root / "single", threads), log) as url:
        yield url


@contextmanager
def one_node_cluster(threads: int, log: IO[str]) -> Iterator[str]:
    """A Ray head that is also the only Cirrus node, and a gateway in front of it (a Ray driver, so it gets
    the nodes' RAY_ settings too)."""
    # Directly under /tmp: Ray's socket paths below it must stay within the 107-byte limit.
    ray = RayCluster(Path(tempfile.mkdtemp(prefix=DIR_PREFIX, dir="/tmp")))
    try:
        ray.start_head(resources={"cirrus": 1.0}, env=state_env(ray.root / "head", threads))
        gateway_env = {
            **RAY_ENV,
            **state_env(ray.root / "gateway", threads),
            "CIRRUS_CLUSTER_NODE_IP": NODE_IP,
        }
        with cirrus_serve(gateway_env, log, "--cluster", ray.address) as url:
            wait_for_node(url)
            yield url
    finally:
        ray.stop()


def wait_for_node(url: str) -> None:
    deadline = time.monotonic() + NODE_JOIN_TIMEOUT_S
    while time.monotonic() < deadline:
        nodes = httpx.get(f"{url}/admin/nodes", timeout=10).json()["result"]["nodes"]
        if any(node["alive"] and "instances" in node for node in nodes):
            return
        time.sleep(0.2)
    raise TimeoutError(f"no node joined the gateway within {NODE_JOIN_TIMEOUT_S} s")


@contextmanager
def serving(side: str, root: Path, threads: int, log: IO[str]) -> Iterator[str]:
    if side == SINGLE:
        with single_node(root, threads, log) as url:
            yield url
    else:
        with one_node_cluster(threads, log) as url:
            yield url


# -- measuring one side ------------------------------------------------------------------------------------------


async def warm_up(url: str, api: Api) -> str | None:
    """The model loaded and every slot used once; the node that answered (None off a cluster)."""
    async with async_client(url, CONCURRENCY) as client:
        body = api.body(request_prompt(0, api.chat), WARM_UP_TOKENS, CIRRUS, stream=False)
        response = await client.post(api.path, json=body)
        response.raise_for_status()
        prompts = [request_prompt(i, api.chat) for i in range(1, CONCURRENCY + 1)]
        await closed_loop(client, api, CIRRUS, prompts, CONCURRENCY, WARM_UP_TOKENS)
    node: str | None = response.headers.get(NODE_HEADER)
    return node


async def measure(url: str, api: Api, plan: Plan) -> tuple[list[Reply], list[Reply], float]:
    """Sequential TTFT requests, then the closed loop; prompts the warm-up did not send, the same on both sides."""
    first = CONCURRENCY + 1
    ttft_prompts = [request_prompt(first + i, api.chat) for i in range(plan.requests)]
    first += plan.requests
    load_prompts = [request_prompt(first + i, api.chat) for i in range(plan.load_requests)]
    async with async_client(url, CONCURRENCY) as client:
        sequential = [await stream_one(client, api, CIRRUS, prompt, TTFT_TOKENS) for prompt in ttft_prompts]
        started = time.perf_counter()
        loaded = await closed_loop(client, api, CIRRUS, load_prompts, CONCURRENCY, LOAD_TOKENS)
    return sequential, loaded, max(reply.stream.last_s for reply in loaded) - started


def measure_side(side: str, plan: Plan, phases: Phases, root: Path, log: IO[str], round_: int) -> Run:
    api = Api(DEFAULT_MODEL, chat=True)
    progress(f"round {round_} {side}: starting")
    with serving(side, root, plan.threads, log) as url:
        node = asyncio.run(warm_up(url, api))
        if (node is None) != (side == SINGLE):
            raise RuntimeError(f"{side}: the warm-up answer came with {NODE_HEADER}={node!r}")
        time.sleep(SPARE_SETTLE_S)  # the cold start took the spare worker; its replacement starts meanwhile

        def attempt(noisy: threading.Event) -> tuple[list[Reply], list[Reply], float]:
            return asyncio.run(watched(measure(url, api, plan), noisy))

        sequential, loaded, wall_s = phases.run(f"round {round_} {side}", attempt)
    tokens = sum(reply.stream.completion_tokens for reply in loaded)
    return Run(side, [reply.stream.ttft_s for reply in sequential], tokens / wall_s)


def measure_all(plan: Plan, phases: Phases, log: IO[str]) -> list[list[Run]]:
    """Rounds of both sides, in the order single, Ray, Ray, single, ..."""
    rounds: list[list[Run]] = []
    with tempfile.TemporaryDirectory(prefix="cirrus-bench-cluster-") as folder:
        for round_ in range(1, plan.rounds + 1):
            order = (SINGLE, CLUSTER) if round_ % 2 else (CLUSTER, SINGLE)
            runs = {side: measure_side(side, plan, phases, Path(folder), log, round_) for side in order}
            rounds.append([runs[SINGLE], runs[CLUSTER]])
    return rounds


# -- report ------------------------------------------------------------------------------------------------------


def spread(values: Sequence[float], unit: str = "") -> str:
    return f"{statistics.median(values):.1f}{unit} [{min(values):.1f} to {max(values):.1f}]"


def run_row(round_: int, run: Run) -> str:
    p50, p90 = run.ttft_ms(50), run.ttft_ms(90)
    return f"{round_:>5}  {run.side:14} {p50:10.1f} {p90:10.1f} {run.tokens_per_s:12.1f}"


def table(rounds: list[list[Run]]) -> list[str]:
    lines = [f"{'round':>5}  {'side':14} {'TTFT p50':>10} {'TTFT p90':>10} {'c=8 tok/s':>12}"]
    lines += [run_row(i, run) for i, runs in enumerate(rounds, 1) for run in runs]
    for column, side in enumerate((SINGLE, CLUSTER)):
        runs = [r[column] for r in rounds]
        lines.append(
            f"median of rounds, {side} [min to max]: TTFT p50 {spread([r.ttft_ms(50) for r in runs], ' ms')}, "
            f"p90 {spread([r.ttft_ms(90) for r in runs], ' ms')}, "
            f"c=8 {spread([r.tokens_per_s for r in runs], ' tok/s')}"
        )
    return lines


def targets(rounds: list[list[Run]]) -> list[str]:
    """Each round's Ray figure against the same round's single-node figure; the median of those decides."""
    overhead = [ray.ttft_ms(50) - single.ttft_ms(50) for single, ray in rounds]
    ratio = [ray.tokens_per_s / single.tokens_per_s for single, ray in rounds]
    median_ms, median_ratio = statistics.median(overhead), statistics.median(ratio)
    return [
        f"TTFT p50 overhead <= {TARGET_TTFT_OVERHEAD_MS:g} ms: {median_ms:+.1f} ms "
        f"(rounds: {', '.join(f'{v:+.1f}' for v in overhead)})  "
        f"{verdict(median_ms <= TARGET_TTFT_OVERHEAD_MS)}",
        f"c=8 tokens/s >= {TARGET_TPS_RATIO}x single node: {median_ratio:.3f}x "
        f"(rounds: {', '.join(f'{v:.3f}' for v in ratio)})  {verdict(median_ratio >= TARGET_TPS_RATIO)}",
    ]


def header(plan: Plan, digest: str, load_before: str) -> list[str]:
    return [
        f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; git {git_head()}; served from a copy of src/, "
        f"digest {digest}",
        f"{DEFAULT_MODEL}, CIRRUS_THREADS={plan.threads} on both sides; {os.cpu_count()} cores; "
        f"load average before: {load_before}",
        f"per side per round: warm-up (1 + {CONCURRENCY} requests, {SPARE_SETTLE_S:g} s settle), then "
        f"{plan.requests} sequential streamed chat requests of {TTFT_TOKENS} tokens (TTFT: send to first "
        f"content delta), then {plan.load_requests} requests of {LOAD_TOKENS} tokens, closed loop at "
        f"c={CONCURRENCY}, temperature 0 (aggregate: completion tokens / first send to last token)",
        "",
    ]


def busy_line(phases: Phases) -> str:
    cores = [f"{name} {' '.join(f'{c:.2f}' for c in values)}" for name, values in phases.busy.items()]
    return "cores kept busy by other processes while measuring: " + "; ".join(cores)


def parse_args(argv: list[str] | None) -> Plan:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=40, help="sequential TTFT requests per round")
    parser.add_argument("--load-requests", type=int, default=48, help=f"requests at c={CONCURRENCY}")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--wait-quiet", type=float, default=60.0, metavar="SECONDS")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.requests < 2 or args.load_requests < CONCURRENCY or args.threads < 1:
        parser.error(f"--rounds, --threads >= 1, --requests >= 2, --load-requests >= {CONCURRENCY}")
    return Plan(args.rounds, args.requests, args.load_requests, args.threads, args.wait_quiet)


def main(argv: list[str] | None = None) -> int:
    plan = parse_args(argv)
    load_before = load_average()
    phases = Phases(plan.wait_quiet_s)
    with (
        frozen_source() as src,
        tempfile.NamedTemporaryFile("w", prefix="cirrus-cluster-", suffix=".log", delete=False) as log,
    ):
        digest = source_digest(src)
        print("\n".join(header(plan, digest, load_before)), flush=True)
        rounds = measure_all(plan, phases, log)
    print("\n".join([*table(rounds), "", busy_line(phases), f"load average after: {load_average()}", ""]))
    print("\n".join(["targets:", *targets(rounds)]))
    edited = (
        ""
        if source_digest(ROOT / "src") == digest
        else " (src/ was edited meanwhile; figures are the copy's)"
    )
    print(f"server logs: {log.name}{edited}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
