"""Rate limits per token and model, against memory storage and a real redis-server."""

import dataclasses
import logging
import re
import socket
import time
from collections.abc import AsyncIterator
from uuid import uuid4

import pytest
import pytest_asyncio

from cirrus.auth.principal import Principal
from cirrus.catalog.spec import ArtifactRef, ModelSpec
from cirrus.errors import RateLimited
from cirrus.ratelimit import RateLimiter, effective_limits
from cirrus.ratelimit.status import format_seconds
from cirrus.ratelimit.storage import uses_redis
from cirrus.resilience import BreakerState
from cirrus.resilience.shared_redis import SharedRedis
from tests.unit.fakes import FakeClock


@pytest.fixture(params=["memory", "redis"])
def storage_uri(request: pytest.FixtureRequest) -> str:
    if request.param == "memory":
        _leave_minute_boundary()
        return "memory://"
    url: str = request.getfixturevalue("redis_url")
    return url


def _leave_minute_boundary() -> None:
    """Memory windows turn on the clock's minute: start a test well inside one, so none turns mid-test."""
    to_boundary = 60.0 - time.time() % 60.0
    if to_boundary < 0.8:
        time.sleep(to_boundary + 0.05)


@pytest_asyncio.fixture(loop_scope="function")
async def limiter(storage_uri: str) -> AsyncIterator[RateLimiter]:
    opened = RateLimiter(storage_uri)
    yield opened
    await opened.close()


def token(requests_per_minute: int | None = None, tokens_per_minute: int | None = None) -> Principal:
    """A fresh token each time, so tests sharing the session's Redis never share a window."""
    return Principal(
        account_id="acct",
        token_id=f"tok-{uuid4().hex}",
        token_name="test",
        requests_per_minute=requests_per_minute,
        tokens_per_minute=tokens_per_minute,
    )


def model(
    name: str = "model-a", requests_per_minute: int | None = None, tokens_per_minute: int | None = None
) -> ModelSpec:
    return ModelSpec(
        id=f"@cf/test/{name}",
        artifact=ArtifactRef(path="/nowhere.gguf"),
        requests_per_minute=requests_per_minute,
        tokens_per_minute=tokens_per_minute,
    )


def with_task(spec: ModelSpec, task: str) -> ModelSpec:
    # The catalog knows text-generation only today; the limits must already serve other tasks.
    return spec.model_copy(update={"task": task})


async def refusal(limiter: RateLimiter, principal: Principal, spec: ModelSpec) -> RateLimited:
    with pytest.raises(RateLimited) as raised:
        await limiter.admit(principal, spec)
    return raised.value


# Effective limits


@pytest.mark.parametrize(
    ("task", "requests"), [("text-generation", 300), ("text-embeddings", 3000), ("summarization", 300)]
)
def test_defaults_follow_workers_ai_per_task(task: str, requests: int) -> None:
    limits = effective_limits(token(), with_task(model(), task))
    assert (limits.requests_per_minute, limits.tokens_per_minute) == (requests, None)


def test_the_catalog_overrides_the_defaults_and_the_token_overrides_the_catalog() -> None:
    spec = model(requests_per_minute=50, tokens_per_minute=1000)
    assert effective_limits(token(), spec).requests_per_minute == 50
    assert effective_limits(token(), spec).tokens_per_minute == 1000
    assert effective_limits(token(requests_per_minute=5), spec).requests_per_minute == 5
    assert effective_limits(token(requests_per_minute=5), spec).tokens_per_minute == 1000
    assert effective_limits(token(tokens_per_minute=7), model()).tokens_per_minute == 7


# Headers


@pytest.mark.parametrize(
    ("seconds", "text"), [(12.0, "12s"), (0.5, "0.5s"), (0.04, "0.1s"), (59.99, "60s"), (0.0, "0s")]
)
def test_reset_is_written_in_seconds_rounded_up(seconds: float, text: str) -> None:
    assert format_seconds(seconds) == text


def test_an_unknown_storage_scheme_is_refused() -> None:
    with pytest.raises(ValueError, match="memory:// or redis://"):
        uses_redis("memcached://127.0.0.1:11211")


# Requests per minute


async def test_the_request_after_the_limit_is_refused_and_headers_count_down(limiter: RateLimiter) -> None:
    principal, spec = token(requests_per_minute=3), model()
    statuses = [await limiter.admit(principal, spec) for _ in range(3)]
    assert [s.headers()["x-ratelimit-remaining-requests"] for s in statuses] == ["2", "1", "0"]
    assert {s.headers()["x-ratelimit-limit-requests"] for s in statuses} == {"3"}
    resets = [s.headers()["x-ratelimit-reset-requests"] for s in statuses]
    assert all(re.fullmatch(r"\d+(\.\d)?s", reset) and 0 < float(reset[:-1]) <= 60 for reset in resets)
    assert "x-ratelimit-limit-tokens" not in statuses[0].headers()

    error = await refusal(limiter, principal, spec)
    assert (error.status, error.code) == (429, 971)
    assert "3 requests per minute" in error.message and spec.id in error.message
    assert error.retry_after_s is not None and 0 < error.retry_after_s <= 60
    assert error.headers["x-ratelimit-remaining-requests"] == "0"
    assert error.headers["x-ratelimit-limit-requests"] == "3"


async def test_a_refused_request_is_not_counted(limiter: RateLimiter) -> None:
    principal, spec = token(requests_per_minute=1), model()
    await limiter.admit(principal, spec)
    for _ in range(3):
        await refusal(limiter, principal, spec)
    other_limit = token(requests_per_minute=2)
    assert (await limiter.admit(other_limit, spec)).headers()["x-ratelimit-remaining-requests"] == "1"


async def test_the_catalog_limit_applies_when_the_token_sets_none(limiter: RateLimiter) -> None:
    principal, spec = token(), model(requests_per_minute=2)
    await limiter.admit(principal, spec)
    await limiter.admit(principal, spec)
    assert "2 requests per minute" in (await refusal(limiter, principal, spec)).message


async def test_the_token_limit_overrides_the_catalog(limiter: RateLimiter) -> None:
    principal, spec = token(requests_per_minute=1), model(requests_per_minute=100)
    await limiter.admit(principal, spec)
    assert "1 requests per minute" in (await refusal(limiter, principal, spec)).message


async def test_default_limits_show_in_the_headers(limiter: RateLimiter) -> None:
    generation = await limiter.admit(token(), model())
    embeddings = await limiter.admit(token(), with_task(model("embedder"), "text-embeddings"))
    assert generation.headers()["x-ratelimit-limit-requests"] == "300"
    assert embeddings.headers()["x-ratelimit-limit-requests"] == "3000"
    assert embeddings.headers()["x-ratelimit-remaining-requests"] == "2999"


async def test_models_and_tokens_are_counted_apart(limiter: RateLimiter) -> None:
    first, second = token(requests_per_minute=1), token(requests_per_minute=1)
    model_a, model_b = model("model-a"), model("model-b")
    await limiter.admit(first, model_a)
    await refusal(limiter, first, model_a)
    assert (await limiter.admit(first, model_b)).headers()["x-ratelimit-remaining-requests"] == "0"
    assert (await limiter.admit(second, model_a)).headers()["x-ratelimit-remaining-requests"] == "0"


# Tokens per minute


async def test_tokens_are_charged_after_the_answer_until_the_budget_is_used_up(limiter: RateLimiter) -> None:
    principal, spec = token(tokens_per_minute=100), model()
    first = (await limiter.admit(principal, spec)).headers()
    assert (first["x-ratelimit-limit-tokens"], first["x-ratelimit-remaining-tokens"]) == ("100", "100")

    await limiter.consume_tokens(principal, spec, 60)
    assert (await limiter.admit(principal, spec)).headers()["x-ratelimit-remaining-tokens"] == "40"

    await limiter.consume_tokens(principal, spec, 500)  # more than is left: uses the window up, never raises
    error = await refusal(limiter, principal, spec)
    assert "100 tokens per minute" in error.message and spec.id in error.message
    assert error.retry_after_s is not None and error.retry_after_s > 0
    assert error.headers["x-ratelimit-remaining-tokens"] == "0"
    assert error.headers["x-ratelimit-remaining-requests"] == "298"  # the refused request was not counted


async def test_tokens_are_free_without_a_tokens_limit(limiter: RateLimiter) -> None:
    principal, spec = token(), model()
    await limiter.consume_tokens(principal, spec, 10**9)
    assert "x-ratelimit-remaining-tokens" not in (await limiter.admit(principal, spec)).headers()


async def test_a_catalog_tokens_limit_applies(limiter: RateLimiter) -> None:
    principal, spec = token(), model(tokens_per_minute=10)
    await limiter.consume_tokens(principal, spec, 10)
    assert "10 tokens per minute" in (await refusal(limiter, principal, spec)).message


# Shared Redis and failing open


async def test_two_gateways_sharing_redis_enforce_one_limit(redis_url: str) -> None:
    first, second = RateLimiter(redis_url), RateLimiter(redis_url)
    principal, spec = token(requests_per_minute=4, tokens_per_minute=50), model()
    try:
        for limiter in (first, second, first, second):
            await limiter.admit(principal, spec)
        await refusal(first, principal, spec)
        await refusal(second, principal, spec)

        tokens_only = token(tokens_per_minute=50)
        await first.consume_tokens(tokens_only, spec, 50)
        assert "50 tokens per minute" in (await refusal(second, tokens_only, spec)).message
    finally:
        await first.close()
        await second.close()


async def test_an_unreachable_redis_counts_on_this_gateway_and_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    dropped: list[tuple[str, int]] = []
    limiter = RateLimiter(
        f"redis://127.0.0.1:{closed_port()}/0", on_charge_dropped=lambda *charge: dropped.append(charge)
    )
    principal, spec = token(requests_per_minute=2, tokens_per_minute=1000), model()
    try:
        with caplog.at_level(logging.WARNING, logger="cirrus.ratelimit"):
            statuses = [await limiter.admit(principal, spec) for _ in range(2)]
            error = await refusal(limiter, principal, spec)
            await limiter.consume_tokens(principal, spec, 100)
            tokens_left = (await limiter.admit(token_of(principal, requests=10), spec)).headers()
    finally:
        await limiter.close()
    assert [s.headers()["x-ratelimit-remaining-requests"] for s in statuses] == ["1", "0"]
    assert (error.status, error.code) == (429, 971)
    assert dropped == [(spec.id, 100)]  # never reached the shared count, charged here instead
    assert tokens_left["x-ratelimit-remaining-tokens"] == "900"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "unreachable" in warnings[0].getMessage()


async def test_while_redis_is_skipped_limits_count_here_and_the_probe_brings_the_shared_count_back(
    redis_url: str,
) -> None:
    clock = FakeClock()
    redis = SharedRedis(redis_url, probe_after_s=2.0, clock=clock)
    limiter = RateLimiter(redis)
    principal, spec = token(requests_per_minute=2), model()
    try:
        for _ in range(2):
            await limiter.admit(principal, spec)
        await refusal(limiter, principal, spec)  # the shared count is used up
        redis.breaker.failed()  # as after a call that timed out
        here = await limiter.admit(principal, spec)  # this gateway's own count, fresh: admitted
        assert here.headers()["x-ratelimit-remaining-requests"] == "1"
        clock.advance(2.0)
        await refusal(limiter, principal, spec)  # the probe reads the shared count again
        assert redis.breaker.state is BreakerState.CLOSED
        await limiter.close()
        client = redis.client()
        assert await redis.run(
            lambda: client.set(f"test:{uuid4().hex}", "1", ex=5)
        )  # still open: not its own
        await client.aclose()
    finally:
        await redis.close()


def token_of(principal: Principal, requests: int) -> Principal:
    """The same limit key (token and account) with another requests limit: its tokens window is shared."""
    return dataclasses.replace(principal, requests_per_minute=requests)


def closed_port() -> int:
    """A port nothing listens on: bound and released, and with no listener refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
