"""Rate limiter latency: microseconds per admit, in memory and against a real redis-server on 127.0.0.1.

Usage: .venv/bin/python -m bench.ratelimit [--admits N]
"""

import argparse
import asyncio
import statistics
import time
from collections.abc import Sequence

from tests.services.redis import running_redis

from cirrus.auth.principal import Principal
from cirrus.catalog.spec import ArtifactRef, ModelSpec
from cirrus.ratelimit import RateLimiter

WARMUP = 100
# Limits far above the loop's count, so every admit takes the full path and none is refused.
NEVER_REACHED = 10**9
SPEC = ModelSpec(id="@cf/bench/model", artifact=ArtifactRef(path="/nowhere.gguf"))
REQUESTS_ONLY = Principal(
    account_id="bench", token_id="requests", token_name="bench", requests_per_minute=NEVER_REACHED
)
WITH_TOKENS = Principal(
    account_id="bench",
    token_id="tokens",
    token_name="bench",
    requests_per_minute=NEVER_REACHED,
    tokens_per_minute=NEVER_REACHED,
)


async def admit_latencies_us(storage_uri: str, principal: Principal, admits: int) -> list[float]:
    limiter = RateLimiter(storage_uri)
    try:
        for _ in range(WARMUP):
            await limiter.admit(principal, SPEC)
        latencies = []
        for _ in range(admits):
            started = time.perf_counter()
            await limiter.admit(principal, SPEC)
            latencies.append((time.perf_counter() - started) * 1e6)
        return latencies
    finally:
        await limiter.close()


def percentile(values: Sequence[float], fraction: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[round(fraction * 100) - 1]


def report(storage: str, limits: str, latencies: Sequence[float]) -> None:
    p50, p99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
    print(f"{storage:<8} {limits:<20} {len(latencies):>7} {p50:>9.0f} {p99:>9.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--admits", type=int, default=2000)
    admits = parser.parse_args().admits
    print(f"{'storage':<8} {'limits':<20} {'admits':>7} {'p50 us':>9} {'p99 us':>9}")
    with running_redis() as redis_url:
        for storage, uri in (("memory", "memory://"), ("redis", redis_url)):
            for limits, principal in (("requests", REQUESTS_ONLY), ("requests + tokens", WITH_TOKENS)):
                report(storage, limits, asyncio.run(admit_latencies_us(uri, principal, admits)))


if __name__ == "__main__":
    main()
