"""TTFT p50 / p99 over the last hour.

The usage records carry no time to first token, so this reads the gateway's own TTFT histogram (Prometheus,
cumulative since the process started) and subtracts a snapshot taken about an hour ago: what remains is the last
hour's histogram, for this gateway process. Percentiles are interpolated within a bucket, as Prometheus's
`histogram_quantile` does, so they are as fine as the buckets.
"""

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

TTFT_METRIC = "cirrus_time_to_first_token_seconds"
WINDOW_S = 3600.0
SNAPSHOT_EVERY_S = 60.0

Buckets = dict[float, float]  # upper bound (le) -> cumulative count


@dataclass(frozen=True)
class Percentiles:
    window_s: float
    samples: int
    p50_s: float | None
    p99_s: float | None


def ttft_buckets(registry: CollectorRegistry) -> Buckets:
    """The TTFT histogram's cumulative buckets, summed over models."""
    buckets: Buckets = {}
    for metric in registry.collect():
        if metric.name != TTFT_METRIC:
            continue
        for sample in metric.samples:
            if sample.name.endswith("_bucket"):
                bound = float(sample.labels["le"])
                buckets[bound] = buckets.get(bound, 0.0) + sample.value
    return buckets


def quantile(q: float, buckets: Buckets) -> float | None:
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = q * buckets[bounds[-1]]
    lower_bound, lower_count = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):  # beyond the last finite bucket: its bound is the best answer there is
                return lower_bound
            share = (rank - lower_count) / (count - lower_count) if count > lower_count else 1.0
            return lower_bound + (bound - lower_bound) * share
        lower_bound, lower_count = bound, count
    return lower_bound


class TtftWindow:
    """Snapshots of the cumulative histogram, at most one a minute, taken when the Overview asks; the first is
    the empty histogram at start. The window runs from the newest snapshot at least an hour old (else the first)."""

    def __init__(self, read: Callable[[], Buckets], now: float) -> None:
        self._read = read
        self._snapshots: deque[tuple[float, Buckets]] = deque([(now, {})])

    def percentiles(self, now: float) -> Percentiles:
        current = self._read()
        if now - self._snapshots[-1][0] >= SNAPSHOT_EVERY_S:
            self._snapshots.append((now, current))
        while len(self._snapshots) > 1 and self._snapshots[1][0] <= now - WINDOW_S:
            self._snapshots.popleft()
        since, baseline = self._snapshots[0]
        window = {bound: count - baseline.get(bound, 0.0) for bound, count in current.items()}
        samples = int(max(window.values(), default=0.0))
        return Percentiles(now - since, samples, quantile(0.5, window), quantile(0.99, window))
