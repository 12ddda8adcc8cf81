"""Redis stopped, frozen (SIGSTOP) and back, under a real `cirrus serve` with a redis-server of its own.

What must hold: every request is answered (200, or 429 from a limit counted on this gateway), none waits much
past one Redis deadline, after the first failure the requests stop paying even that, the response cache misses
and stores nothing, and once Redis answers again the shared rate limit applies by itself within a few seconds.
"""

import asyncio
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from cirrus.auth import Permission
from cirrus.auth.store import IdentityStore, Plan
from cirrus.config import Settings
from cirrus.db import open_database
from cirrus.ratelimit import RedisUnavailable, SharedRedis
from tests.integration.gateway import SMOLLM, bearer, write_gateway_catalog
from tests.integration.server import running_server
from tests.services.redis import RedisServer, dedicated_redis

TIMEOUT_S: float = Settings.model_fields["redis_timeout_s"].default
PROBE_AFTER_S: float = Settings.model_fields["redis_probe_after_s"].default
MARGIN_S = 3.0  # the machine is slow and shared
REFUSALS = 20
BODY = {"prompt": "Say hi", "max_tokens": 1, "temperature": 0}


@dataclass(frozen=True)
class Tokens:
    unlimited: str
    two_per_minute: str  # counted on the gateway while Redis is stopped
    one_per_minute: str  # counted on the gateway while Redis is frozen
    five_per_minute: str  # used up in Redis before the freeze


@dataclass
class Gateway:
    client: httpx.Client
    redis: RedisServer
    tokens: Tokens


@dataclass(frozen=True)
class Asked:
    status: int
    code: int | None
    cache: str | None
    seconds: float


async def _provision(database: str) -> Tokens:
    db = await open_database(database)
    try:
        store = IdentityStore(db)
        await store.migrate()
        account = (await store.create_account("redis-faults", Plan.PAID)).id

        async def token(name: str, requests_per_minute: int | None = None) -> str:
            secret, _ = await store.create_token(
                account, name, permissions=(Permission.RUN,), requests_per_minute=requests_per_minute
            )
            return secret

        return Tokens(
            await token("unlimited"), await token("two", 2), await token("one", 1), await token("five", 5)
        )
    finally:
        await db.close()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    directory = tmp_path_factory.mktemp("redis-faults")
    database = str(directory / "cirrus.db")
    tokens = asyncio.run(_provision(database))
    catalog = str(write_gateway_catalog(directory))
    with (
        dedicated_redis() as redis,
        running_server(
            directory, "--catalog", catalog, database=database, redis_url=redis.url, spare_workers="0"
        ) as server,
        server.client(timeout_s=30.0) as client,
    ):
        gateway = Gateway(client, redis, tokens)
        assert ask(gateway, tokens.unlimited).status == 200  # the cold start, before any fault
        yield gateway


def ask(gateway: Gateway, token: str, cache_key: str | None = None) -> Asked:
    headers = bearer(token)
    if cache_key is not None:
        headers |= {"cf-aig-cache-ttl": "60", "cf-aig-cache-key": cache_key}
    started = time.monotonic()
    response = gateway.client.post(f"/ai/run/{SMOLLM}", json=BODY, headers=headers)
    seconds = time.monotonic() - started
    errors = response.json().get("errors") or [{}]
    return Asked(
        response.status_code, errors[0].get("code"), response.headers.get("cf-aig-cache-status"), seconds
    )


def assert_answered_within_one_deadline(answers: list[Asked]) -> None:
    assert [answer.status for answer in answers] == [200] * len(answers)
    slowest = max(answer.seconds for answer in answers)
    assert slowest < TIMEOUT_S + MARGIN_S, f"a request waited {slowest:.2f}s"


def assert_refused_without_waiting_on_redis(gateway: Gateway, token: str) -> None:
    """The token's limit, counted on this gateway, is used up: each refusal is quick unless it pays the deadline.
    Were Redis asked each time, these would take REFUSALS deadlines at least; half of that is the bound."""
    refusals = [ask(gateway, token) for _ in range(REFUSALS)]
    assert {(refusal.status, refusal.code) for refusal in refusals} == {(429, 971)}
    spent = sum(refusal.seconds for refusal in refusals)
    assert spent < REFUSALS * TIMEOUT_S / 2, f"{REFUSALS} refusals took {spent:.2f}s: Redis was not skipped"


def first_until(gateway: Gateway, token: str, wanted: int, within_s: float) -> Asked:
    """Ask every 0.25 s until the answer has the wanted status, for at most `within_s`."""
    deadline = time.monotonic() + within_s
    while True:
        answer = ask(gateway, token)
        if answer.status == wanted or time.monotonic() > deadline:
            return answer
        time.sleep(0.25)


async def test_a_frozen_redis_costs_one_deadline_then_nothing_until_a_probe_finds_it_back() -> None:
    with dedicated_redis() as server:
        shared = SharedRedis(server.url, timeout_s=TIMEOUT_S, probe_after_s=0.5)
        client = shared.client()
        try:
            assert await shared.run(lambda: client.set("k", "v"))
            server.freeze()
            started = time.monotonic()
            with pytest.raises(RedisUnavailable, match="no answer within the deadline"):
                await shared.run(lambda: client.get("k"))
            first_s, started = time.monotonic() - started, time.monotonic()
            for _ in range(100):
                with pytest.raises(RedisUnavailable, match="skipped"):
                    await shared.run(lambda: client.get("k"))
            skipped_s = time.monotonic() - started
            server.resume()
            await asyncio.sleep(0.6)
            assert await shared.run(lambda: client.get("k")) == b"v"
        finally:
            await client.aclose()
            await shared.close()
    assert first_s < TIMEOUT_S + MARGIN_S, f"the first call waited {first_s:.2f}s"
    assert skipped_s < TIMEOUT_S, f"100 skipped calls took {skipped_s:.2f}s"


def test_a_stopped_redis_costs_nothing_and_the_shared_limit_comes_back_by_itself(gateway: Gateway) -> None:
    tokens = gateway.tokens
    gateway.redis.stop()
    try:
        assert_answered_within_one_deadline([ask(gateway, tokens.unlimited) for _ in range(4)])
        counted_here = [ask(gateway, tokens.two_per_minute) for _ in range(2)]
        assert [answer.status for answer in counted_here] == [200, 200]
        assert_refused_without_waiting_on_redis(gateway, tokens.two_per_minute)
    finally:
        gateway.redis.start()
    # This gateway's count for the token is used up; the restarted Redis is empty. So a 200 is the shared
    # count answering again, and its limit then refuses on its own.
    back = first_until(gateway, tokens.two_per_minute, 200, PROBE_AFTER_S + MARGIN_S)
    assert back.status == 200, "the shared rate limit did not come back"
    # A call that found Redis back may have counted its request there and still missed its deadline (the first
    # connection after the restart), and been answered from this gateway's used-up count: at most one more
    # request then fits before the shared limit refuses on its own.
    after = [
        (answer.status, answer.code) for answer in (ask(gateway, tokens.two_per_minute) for _ in range(2))
    ]
    assert after in ([(200, None), (429, 971)], [(429, 971), (429, 971)]), after
    key = uuid.uuid4().hex
    statuses = [ask(gateway, tokens.unlimited, key).cache for _ in range(5)]
    assert statuses[0] == "MISS" and "HIT" in statuses, statuses  # the store may lag its answer a moment


def test_a_frozen_redis_costs_one_bounded_wait_and_the_shared_limit_comes_back_by_itself(
    gateway: Gateway,
) -> None:
    tokens = gateway.tokens
    used_up = [ask(gateway, tokens.five_per_minute) for _ in range(6)]
    assert [answer.status for answer in used_up] == [200] * 5 + [429]  # counted in Redis
    gateway.redis.freeze()
    try:
        assert_answered_within_one_deadline([ask(gateway, tokens.unlimited) for _ in range(6)])
        key = uuid.uuid4().hex
        cached = [ask(gateway, tokens.unlimited, key) for _ in range(2)]
        assert_answered_within_one_deadline(cached)
        assert [answer.cache for answer in cached] == ["MISS", "MISS"]  # nothing stored, nothing read
        assert ask(gateway, tokens.five_per_minute).status == 200  # counted here: 1 of 5
        assert ask(gateway, tokens.one_per_minute).status == 200
        assert_refused_without_waiting_on_redis(gateway, tokens.one_per_minute)
    finally:
        gateway.redis.resume()
    # Redis kept the used-up count; this gateway's own count would admit 3 more. Past the probe time, the first
    # request probes Redis and is refused by the shared count.
    time.sleep(PROBE_AFTER_S + 0.2)
    answers = [ask(gateway, tokens.five_per_minute)]
    while answers[-1].status == 200 and len(answers) < 3:
        time.sleep(0.25)
        answers.append(ask(gateway, tokens.five_per_minute))
    assert (answers[-1].status, answers[-1].code) == (429, 971), answers
