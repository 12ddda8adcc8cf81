"""PNG charts for the bench and cost reports (matplotlib, Agg backend: no display needed)."""

from pathlib import Path
from typing import Any

import numpy as np

from cirrus.evals.cost import (
    Capacity,
    TokenPrices,
    Traffic,
    break_even_requests_per_day,
    reserved_monthly,
    serverless_monthly,
)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def latency_plot(result: dict[str, Any], out: Path) -> Path:
    """Empirical distributions of TTFT and latency over the warm requests, P50/P90/P99 marked, cold start too."""
    plt = _pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    cold = result.get("cold")
    for axis, key, title in zip(
        axes, ("ttft_s", "latency_s"), ("time to first token", "latency"), strict=True
    ):
        values = np.sort([t[key] for t in result["timings"]])
        fractions = np.arange(len(values) + 1) / len(values)
        axis.step(np.r_[values[0], values], fractions, where="post", label="warm requests")
        for name, style in (("p50", ":"), ("p90", "--"), ("p99", "-.")):
            mark = result["warm"][key][name]
            axis.axvline(mark, color="grey", linestyle=style, label=f"{name.upper()} {mark:.3f}s")
        if cold:
            axis.axvline(cold[key], color="red", label=f"cold {cold[key]:.3f}s")
        axis.set(title=title, xlabel="seconds", ylabel="fraction of requests", ylim=(0, 1.02))
        axis.legend(fontsize=8, loc="lower right")
    warm = result["warm"]
    figure.suptitle(f"{result['model']}: {warm['requests']} requests, concurrency {warm['concurrency']}")
    figure.tight_layout()
    figure.savefig(out, format="png", dpi=110)
    plt.close(figure)
    return out


def cost_plot(
    traffic: Traffic, prices: TokenPrices, capacity: Capacity, hourly: float | None, out: Path
) -> Path:
    """Monthly cost against requests per day, serverless and reserved, on log axes around the profile."""
    plt = _pyplot()
    daily = np.logspace(
        np.log10(traffic.requests_per_day / 100), np.log10(traffic.requests_per_day * 100), 400
    )
    profiles = [
        Traffic(float(r), traffic.peak_to_mean, traffic.input_tokens, traffic.output_tokens) for r in daily
    ]
    figure, axis = plt.subplots(figsize=(8, 4.8))
    axis.plot(daily, [serverless_monthly(prices, p) for p in profiles], label="serverless")
    if hourly is not None:
        reserved = [reserved_monthly(hourly, capacity, p) for p in profiles]
        axis.step(daily, reserved, where="post", label=f"reserved at ${hourly:g}/hour")
        even = break_even_requests_per_day(prices, hourly, capacity, traffic)
        if even is not None:
            axis.axvline(even, color="red", linestyle="--", label=f"break-even {even:,.0f}/day")
    axis.axvline(traffic.requests_per_day, color="grey", linestyle=":", label="this profile")
    axis.set(xscale="log", yscale="log", xlabel="requests per day", ylabel="USD per month")
    axis.set_title("Monthly cost against traffic")
    axis.legend()
    axis.grid(True, which="both", alpha=0.3)
    figure.tight_layout()
    figure.savefig(out, format="png", dpi=110)
    plt.close(figure)
    return out
