"""The console's server time per page with 10,000 usage records: Overview (its HTML and its JSON), Usage, Logs,
one log record and Models, at p50/p99; and the Overview's TTFT query alone.

A gateway database is filled through UsageStore with 10,000 records of one account (three models, three tokens,
a tenth of them errors, nine in ten with a time to first token), all started within the last hour: the worst case
for the Overview, whose traffic and TTFT read that hour's rows. Each page is then asked for over HTTP, in this
process (httpx's ASGI transport, no sockets), with an admin's console session, through the same app `cirrus
serve` runs; no model is loaded. Rounds of the pages alternate.

Usage: .venv/bin/python -m bench.console [--rounds N] [--postgres]
"""

import argparse
import asyncio
import random
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
from tests.services.postgres import create_database, running_postgres

from cirrus.auth import Permission
from cirrus.config import Settings
from cirrus.console.read_models.latency import ttft_last_hour
from cirrus.metering.record import UsageRecord
from cirrus.metering.store import UsageStore
from cirrus.platform import Platform
from cirrus.server.app import create_app

RECORDS = 10_000
MODELS = (
    "@cf/huggingface/smollm2-135m-instruct",
    "@cf/google/gemma-3-270m",
    "@cf/sentence-transformers/all-minilm-l6-v2",  # embeddings: no first token
)
WARM_UP_ROUNDS = 5
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
TARGET_MS = 100.0


def records(account_id: str, token_ids: list[str], now: float) -> list[UsageRecord]:
    chance = random.Random(15)
    made = []
    for i in range(RECORDS):
        model = MODELS[i % len(MODELS)]
        failed = i % 10 == 0
        embedding = model == MODELS[2]
        made.append(
            UsageRecord(
                request_id=f"bench-{i:05d}",
                account_id=account_id,
                token_id=token_ids[i % len(token_ids)],
                model=model,
                status=429 if failed else 200,
                error_code=3040 if failed else None,
                prompt_tokens=chance.randint(10, 2000),
                completion_tokens=0 if embedding or failed else chance.randint(1, 500),
                cached_tokens=0,
                queue_s=chance.random() * 0.05,
                cold_start=i % 500 == 0,
                execution_s=chance.random() * 3,
                neurons=chance.random() * 20,
                cost_usd=chance.random() * 0.0002,
                cache_status="BYPASS" if embedding else "MISS",
                started_at=now - 3590 + i * 0.358,
                route="openai",
                stream=i % 2 == 0,
                ttft_ms=None if embedding or failed else chance.lognormvariate(4.5, 0.6),
            )
        )
    return made


async def fill(platform: Platform) -> tuple[str, str, str]:
    """An admin's token and the account's records; returns the token's secret, the account and a request id."""
    identity = platform.gateway.identity
    account = await identity.create_account("bench")
    secret, _ = await identity.create_token(account.id, "admin", permissions=tuple(Permission))
    token_ids = [(await identity.create_token(account.id, f"member-{n}"))[1].id for n in range(3)]
    made = records(account.id, token_ids, time.time())
    store: UsageStore = platform.usage_store
    for start in range(0, len(made), 1000):
        await store.write(made[start : start + 1000])
    return secret, account.id, made[RECORDS // 2 + 1].request_id  # a chat answer, with its first token


async def timed_get(client: httpx.AsyncClient, path: str) -> float:
    started = time.perf_counter()
    answer = await client.get(path)
    elapsed = (time.perf_counter() - started) * 1000
    if answer.status_code != 200:
        raise RuntimeError(f"GET {path}: HTTP {answer.status_code}: {answer.text[:200]}")
    return elapsed


async def timed_ttft(platform: Platform, account_id: str | None) -> float:
    """The Overview's TTFT read model alone: its count and its two ORDER BY ... OFFSET statements."""
    started = time.perf_counter()
    await ttft_last_hour(platform.gateway.db, time.time(), account_id)
    return (time.perf_counter() - started) * 1000


async def measure(settings: Settings, rounds: int) -> dict[str, list[float]]:
    platform = Platform(settings)
    await platform.start()
    try:
        secret, account_id, request_id = await fill(platform)
        pages = {
            "Overview": "/console/overview",
            "Overview JSON": "/console/api/overview",
            "Usage": "/console/usage",
            "Logs": "/console/logs",
            "Log record": f"/console/logs/{request_id}",
            "Models": "/console/models",
        }
        transport = httpx.ASGITransport(app=create_app(platform))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8787") as client:
            signed_in = await client.post("/console/signin", content=f"token={secret}", headers=FORM)
            if signed_in.status_code != 303:
                raise RuntimeError(f"sign-in: HTTP {signed_in.status_code}")
            samples: dict[str, list[float]] = {name: [] for name in pages}
            for round_ in range(WARM_UP_ROUNDS + rounds):
                for name, path in pages.items():
                    elapsed = await timed_get(client, path)
                    if round_ >= WARM_UP_ROUNDS:
                        samples[name].append(elapsed)
        samples["TTFT SQL, node"] = [await timed_ttft(platform, None) for _ in range(rounds)]
        samples["TTFT SQL, acct"] = [await timed_ttft(platform, account_id) for _ in range(rounds)]
        return samples
    finally:
        await platform.close()


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def report(label: str, samples: dict[str, list[float]]) -> None:
    rounds = len(next(iter(samples.values())))
    print(f"\n{label}: {RECORDS:,} usage records in the last hour, {rounds} GETs per page, ms per request")
    print(f"{'':16}{'p50':>9}{'p99':>9}")
    worst = 0.0
    for name, times in samples.items():
        p50, p99 = percentile(times, 0.5), percentile(times, 0.99)
        worst = max(worst, p99)
        print(f"{name:16}{p50:9.2f}{p99:9.2f}")
    verdict = "PASS" if worst < TARGET_MS else "FAIL"
    print(f"target: every page under {TARGET_MS:.0f} ms: worst p99 {worst:.2f} ms {verdict}")


@contextmanager
def bench_settings(postgres: bool) -> Iterator[Settings]:
    with ExitStack() as stack:
        state = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cirrus-bench-console-")))
        database = create_database(stack.enter_context(running_postgres())) if postgres else None
        yield Settings(state_dir=state, spare_workers=0, database=database)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--postgres", action="store_true", help="the gateway database on a real PostgreSQL")
    args = parser.parse_args()
    with bench_settings(args.postgres) as settings:
        samples = asyncio.run(measure(settings, args.rounds))
    report("PostgreSQL" if args.postgres else "SQLite", samples)


if __name__ == "__main__":
    main()
