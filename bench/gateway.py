"""The gateway's own cost per request: authentication, rate limits, budget check, response-cache lookup (and
store), metering and the request log, at p50/p99, against the same request with the gateway off.

Both sides run in this process over one ASGI app each (httpx's ASGI transport, no sockets), on one platform
with the real engine: SmolLM2, one output token from a prompt the prefix cache already holds, so the engine's
part is small and the same on both sides. "Off" is the same routes and middleware minus authentication and
the access log, with a pipeline that goes straight to the service. Rounds of each alternate.

Usage: .venv/bin/python -m bench.gateway [--requests N] [--redis]
"""

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
from tests.services.redis import running_redis

from cirrus.auth import Permission
from cirrus.auth.store import IdentityStore, Plan
from cirrus.catalog import DEFAULT_MODEL, ModelSpec
from cirrus.config import Settings
from cirrus.db import open_database
from cirrus.gateway.answer import Answer
from cirrus.gateway.call import Call
from cirrus.platform import Platform
from cirrus.server.app import build_api, build_middleware_stack
from cirrus.server.body_limit import BodyLimitMiddleware
from cirrus.server.json_body import JsonBodyMiddleware
from cirrus.server.request_id import RequestIdMiddleware
from cirrus.service import InferenceRequest

ROUND = 25
BODY = {"prompt": "Say hi", "max_tokens": 1, "temperature": 0}
PATH = f"/ai/run/{DEFAULT_MODEL}"


class GatewayOff:
    """Resolve and run with no gateway work: the catalog, then the service."""

    def __init__(self, platform: Platform) -> None:
        self.platform = platform

    def resolve(self, call: Call, model: str) -> ModelSpec:
        return self.platform.catalog.get(model)

    async def run(self, call: Call, request: InferenceRequest) -> Answer:
        generation = await self.platform.service.start(request)
        return Answer(_events(generation), generation.aclose, generation.cold_start, generation.lease.queue_s)


async def _events(generation: Any) -> AsyncIterator[Any]:
    async for event in generation:
        yield event


class PlatformWithoutGateway:
    """The platform as the routes see it, with `GatewayOff` as its pipeline."""

    def __init__(self, platform: Platform) -> None:
        self._platform = platform
        self.pipeline = GatewayOff(platform)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._platform, name)


def app_without_gateway(platform: Platform) -> Any:
    api = build_api(platform)
    api.state.platform = PlatformWithoutGateway(platform)
    app = BodyLimitMiddleware(JsonBodyMiddleware(api), platform.settings.max_body_bytes)
    return RequestIdMiddleware(app)


async def provision(settings: Settings) -> str:
    db = await open_database(settings.database_url())
    try:
        identity = IdentityStore(db)
        await identity.migrate()
        account = await identity.create_account("bench", Plan.PAID)
        secret, _ = await identity.create_token(
            account.id, "bench", permissions=(Permission.RUN,), requests_per_minute=10**6
        )
        return secret
    finally:
        await db.close()


async def timed(client: httpx.AsyncClient, headers: dict[str, str]) -> float:
    started = time.perf_counter()
    response = await client.post(PATH, json=BODY, headers=headers)
    elapsed = time.perf_counter() - started
    if response.status_code != 200:
        raise RuntimeError(f"HTTP {response.status_code}: {response.text}")
    return elapsed * 1000


def on_headers(secret: str) -> dict[str, str]:
    """A fresh cache key each time: every request pays a lookup that misses, then a store."""
    return {
        "Authorization": f"Bearer {secret}",
        "cf-aig-cache-ttl": "60",
        "cf-aig-cache-key": uuid.uuid4().hex,
    }


async def measure(settings: Settings, requests: int) -> tuple[list[float], list[float]]:
    secret = await provision(settings)
    platform = Platform(settings)
    await platform.start()
    try:
        on = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=build_middleware_stack(build_api(platform), platform)),
            base_url="http://bench",
        )
        off = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app_without_gateway(platform)), base_url="http://bench"
        )
        for _ in range(ROUND):  # warm-up: cold start, prefix cache, code paths
            await timed(on, on_headers(secret))
            await timed(off, {})
        with_gateway: list[float] = []
        without: list[float] = []
        while len(with_gateway) < requests:
            with_gateway += [await timed(on, on_headers(secret)) for _ in range(ROUND)]
            without += [await timed(off, {}) for _ in range(ROUND)]
        await on.aclose()
        await off.aclose()
        return with_gateway, without
    finally:
        await platform.close()


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def report(label: str, on: list[float], off: list[float]) -> None:
    print(f"\n{label}: {len(on)} requests each side, one output token, ms per request")
    print(f"{'':28}{'p50':>9}{'p90':>9}{'p99':>9}{'mean':>9}")
    for name, samples in (("gateway on", on), ("gateway off", off)):
        row = [percentile(samples, q) for q in (0.5, 0.9, 0.99)] + [statistics.fmean(samples)]
        print(f"{name:28}" + "".join(f"{v:9.2f}" for v in row))
    diff = [percentile(on, q) - percentile(off, q) for q in (0.5, 0.9, 0.99)]
    print(f"{'overhead (on - off)':28}" + "".join(f"{v:9.2f}" for v in diff))
    verdict = "PASS" if diff[0] < 2.0 else "FAIL"
    print(f"target: overhead p50 under 2 ms: {diff[0]:.2f} ms {verdict}")


@contextmanager
def bench_settings(redis: bool) -> Iterator[Settings]:
    with ExitStack() as stack:
        state = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cirrus-bench-gateway-")))
        redis_url = stack.enter_context(running_redis()) if redis else None
        yield Settings(state_dir=state, threads=2, spare_workers=0, redis_url=redis_url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--redis", action="store_true", help="rate limits and cache on a real redis-server")
    args = parser.parse_args()
    with bench_settings(args.redis) as settings:
        on, off = asyncio.run(measure(settings, args.requests))
    storage = "Redis (limits, cache) and SQLite (tokens, usage)" if args.redis else "SQLite, limits in memory"
    report(f"{DEFAULT_MODEL}, {storage}", on, off)


if __name__ == "__main__":
    main()
