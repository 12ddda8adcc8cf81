"""Placement over a simulated fleet (issue 11): Cirrus's placer against random, round-robin, least-loaded and
Ray Serve's multiplexing rule, on the same arrivals and the same simulated nodes.

Usage: .venv/bin/python -m bench.fleet [--nodes 1000] [--models 500] [--requests N] [--seed S] [--load 0.7]
                                       [--png PATH] [--policies cirrus,random,...]

The workload (bench/fleet_workload.py): model sizes, Zipf popularity with bursty arrivals as in serverless
traces (Azure Functions 2019, Shahrad et al., ATC'20), cold-start and pull times from what bench/ measured here.
"Load" is the offered busy-slot demand (arrival rate x mean time a request holds a slot) over the total slots
the fleet's memory holds in the demand's model mix. Each node runs the pool's rules (bench/fleet_node.py) and
starts with half its memory in idle instances; the event loop is bench/fleet_sim.py. The first `--warmup` share
of requests (by arrival) is not measured.

Reported per policy, over the measured requests: warm hits (the request's slot was on an instance already ready
when it arrived: it waited for no cold start, though it may have queued behind busy slots), cold starts and
registry pulls in the measured window (per 1,000 requests), p50/p99 TTFT, memory utilisation (instances'
memory over the fleet's budget, averaged over time from the end of the warm-up to the last arrival), and the
policy's own time per decision (Cirrus's placer: `choose` alone, measured with perf_counter).

Targets (issue 11): fewer cold starts than every baseline, and p99 TTFT at most half of least-loaded's, at 70%
load; and the placer's own time per decision under 1 ms at 10,000 nodes (`--nodes 10000 --policies cirrus`).
"""

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench.fleet_policies import (
    CirrusPolicy,
    LeastLoadedPolicy,
    RandomPolicy,
    RayMultiplexPolicy,
    RoundRobinPolicy,
)
from bench.fleet_sim import Fleet, Policy, Result
from bench.fleet_workload import KEEP_ALIVE_S, Workload, make_workload

POLICIES = ("cirrus", "random", "round-robin", "least-loaded", "ray-multiplex")


def policy_named(name: str, seed: int) -> Policy:
    made: dict[str, Policy] = {
        "cirrus": CirrusPolicy(),
        "random": RandomPolicy(seed),
        "round-robin": RoundRobinPolicy(),
        "least-loaded": LeastLoadedPolicy(),
        "ray-multiplex": RayMultiplexPolicy(),
    }
    return made[name]


def describe(workload: Workload, args: argparse.Namespace) -> str:
    sizes = np.array([model.artifact_bytes for model in workload.models]) / 1e9
    shares = np.sort([model.share for model in workload.models])[::-1]
    return "\n".join(
        [
            f"fleet: {len(workload.nodes)} nodes, {len(workload.models)} models, {len(workload.arrival_s)} requests,"
            f" seed {args.seed}, load {args.load:.2f} (offered busy slots {workload.offered_busy_slots:.0f}"
            f" of {workload.total_slots:.0f}), keep-alive {KEEP_ALIVE_S:.0f} s",
            f"simulated time {workload.duration_s:.0f} s ({len(workload.arrival_s) / workload.duration_s:.0f}"
            f" requests/s); first {args.warmup:.0%} of requests are warm-up, not measured",
            f"model sizes GB: p10 {np.percentile(sizes, 10):.2f}, median {np.median(sizes):.2f},"
            f" p90 {np.percentile(sizes, 90):.2f}, max {sizes.max():.1f}; hottest model {shares[0]:.1%} of requests,"
            f" top 10 {shares[:10].sum():.1%}, beyond the top 100 {shares[100:].sum():.1%}",
        ]
    )


def table(results: Sequence[Result]) -> str:
    lines = [
        f"{'policy':<14} {'warm hits':>9} {'cold/1k':>8} {'pulls':>6} {'pulls/1k':>8} {'p50 TTFT':>9}"
        f" {'p99 TTFT':>9} {'memory':>7} {'decision mean/p99':>18} {'wall':>6}"
    ]
    for result in results:
        decisions = result.decision_us
        cost = f"{decisions.mean():.0f}/{np.percentile(decisions, 99):.0f} us" if decisions.size else "-"
        lines.append(
            f"{result.policy:<14} {result.warm_rate:>9.1%} {result.cold_per_1k:>8.1f} {result.pulls:>6}"
            f" {result.pulls_per_1k:>8.2f} {result.p50_ttft_s:>8.3f}s {result.p99_ttft_s:>8.2f}s"
            f" {result.memory_utilisation:>7.1%} {cost:>18} {result.wall_s:>5.0f}s"
        )
    return "\n".join(lines)


def verdict(results: Sequence[Result], nodes: int) -> str:
    by_name = {result.policy: result for result in results}
    cirrus = by_name.get("cirrus")
    if cirrus is None:
        return "targets: not judged (cirrus not run)"
    lines = []
    baselines = [result for result in results if result.policy != "cirrus"]
    if baselines:
        fewest = min(baselines, key=lambda result: result.cold_per_1k)
        passed = all(cirrus.cold_per_1k < result.cold_per_1k for result in baselines)
        lines.append(
            f"fewer cold starts than every baseline: {cirrus.cold_per_1k:.1f}/1k against the fewest,"
            f" {fewest.policy}'s {fewest.cold_per_1k:.1f}/1k  {'PASS' if passed else 'FAIL'}"
        )
    least = by_name.get("least-loaded")
    if least is not None:
        ratio = cirrus.p99_ttft_s / least.p99_ttft_s
        lines.append(
            f"p99 TTFT <= 0.5x least-loaded's: {cirrus.p99_ttft_s:.2f}s / {least.p99_ttft_s:.2f}s ="
            f" {ratio:.3f}x  {'PASS' if ratio <= 0.5 else 'FAIL'}"
        )
    p99 = np.percentile(cirrus.decision_us, 99)
    lines.append(
        f"placer cost per decision at {nodes} nodes: mean {cirrus.decision_us.mean():.0f} us,"
        f" p99 {p99:.0f} us, max {cirrus.decision_us.max():.0f} us  {'PASS' if p99 < 1000 else 'FAIL'} (< 1 ms)"
    )
    for rule in ("warm", "busy", "cached", "pull"):
        costs = cirrus.decision_us[cirrus.decision_rules == rule]
        if costs.size:
            lines.append(
                f"  decisions ending {rule}: {costs.size}, mean {costs.mean():.0f} us,"
                f" p99 {np.percentile(costs, 99):.0f} us"
            )
    return "targets:\n  " + "\n  ".join(lines)


def plot(results: Sequence[Result], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [result.policy for result in results]
    colours = ["tab:blue" if name == "cirrus" else "tab:gray" for name in names]
    figure, axes = plt.subplots(1, 3, figsize=(13, 4))
    for axis, values, label in (
        (axes[0], [r.cold_per_1k for r in results], "cold starts per 1,000 requests"),
        (axes[1], [r.p99_ttft_s for r in results], "p99 TTFT (s)"),
        (axes[2], [100 * r.warm_rate for r in results], "warm hits (%)"),
    ):
        axis.bar(names, values, color=colours)
        axis.set_title(label)
        if label.startswith("p99"):
            axis.set_yscale("log")
        axis.tick_params(axis="x", rotation=30)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--models", type=int, default=500)
    parser.add_argument("--requests", type=int, default=150_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--load", type=float, default=0.7)
    parser.add_argument(
        "--warmup", type=float, default=0.2, help="share of requests (by arrival) not measured"
    )
    parser.add_argument("--png", type=Path, default=Path(__file__).with_name("fleet.png"))
    parser.add_argument(
        "--policies", default=",".join(POLICIES), help="comma-separated, from " + ", ".join(POLICIES)
    )
    args = parser.parse_args(argv)
    unknown = set(args.policies.split(",")) - set(POLICIES)
    if unknown:
        parser.error(f"unknown policies: {', '.join(sorted(unknown))}")
    if not (
        args.load > 0 and 0 <= args.warmup < 1 and args.nodes > 0 and args.models > 0 and args.requests > 0
    ):
        parser.error("--load, --nodes, --models and --requests must be positive, --warmup in [0, 1)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()), flush=True)
    started = time.perf_counter()
    workload = make_workload(args.nodes, args.models, args.requests, args.load, args.seed)
    print(describe(workload, args), flush=True)
    print(f"workload generated in {time.perf_counter() - started:.1f} s", flush=True)
    results = []
    for name in args.policies.split(","):
        results.append(Fleet(workload, policy_named(name, args.seed), args.warmup).run())
        print(f"  {name}: {results[-1].wall_s:.1f} s", flush=True)
    print(table(results))
    print(verdict(results, args.nodes))
    plot(
        results, args.png, f"{args.nodes} nodes, {args.models} models, load {args.load:.2f}, seed {args.seed}"
    )
    print(f"plot: {args.png}")
    print("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
