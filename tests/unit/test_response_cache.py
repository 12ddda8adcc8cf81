"""The response cache: keys, header policy, the database and Redis stores, and replay.

The database store runs on SQLite and on a real PostgreSQL (conftest's `database`); Redis is a real
redis-server started once for the session. Nothing is mocked.
"""

import asyncio
import dataclasses
import logging
import socket
import time
import uuid

import pytest
import redis
import redis.asyncio

from cirrus.cache import (
    CachedAnswer,
    CachePolicy,
    DatabaseResponseStore,
    RedisResponseStore,
    ResponseCache,
    cache_key,
    is_deterministic,
    replay,
)
from cirrus.cache.keys import canonical_input
from cirrus.cache.policy import KEY_HEADER, SKIP_HEADER, TTL_HEADER
from cirrus.db.database import Database
from cirrus.errors import InvalidInput
from cirrus.ratelimit import SharedRedis
from cirrus.runtime.events import Finished, GenerationEvent, TextDelta
from cirrus.runtime.params import GenerationInput, SamplingParams, Usage
from tests.unit.fakes import FakeClock

MODEL = "@cf/test/model"
GREEDY = GenerationInput(prompt="Why is the sky blue?", sampling=SamplingParams(temperature=0.0))
SEEDED = GenerationInput(
    messages=({"role": "user", "content": "héllo"},), sampling=SamplingParams(temperature=0.7, seed=7)
)
ANSWER = CachedAnswer("Rayleigh scattering. 🌤", "stop", Usage(12, 5, 3), MODEL, 1_700_000_000.5)


# -- a real Redis ---------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _closed_port_url() -> str:
    return f"redis://127.0.0.1:{_free_port()}/0"


class Clock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# -- keys -----------------------------------------------------------------------------------------------------


def test_the_same_request_gets_the_same_key() -> None:
    again = GenerationInput(prompt="Why is the sky blue?", sampling=SamplingParams(temperature=0.0))
    key = cache_key("acct", MODEL, GREEDY, None)
    assert key == cache_key("acct", MODEL, again, None)
    assert len(key) == 64 and int(key, 16) >= 0


def _greedy(**sampling: float | int | str | tuple[str, ...]) -> GenerationInput:
    return dataclasses.replace(GREEDY, sampling=dataclasses.replace(GREEDY.sampling, **sampling))  # type: ignore[arg-type]


def _seeded(**sampling: float | int) -> GenerationInput:
    return dataclasses.replace(SEEDED, sampling=dataclasses.replace(SEEDED.sampling, **sampling))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "changed",
    [
        dataclasses.replace(GREEDY, prompt="Why is the sea blue?"),
        dataclasses.replace(GREEDY, raw=True),
        GenerationInput(
            messages=({"role": "user", "content": "Why is the sky blue?"},), sampling=GREEDY.sampling
        ),
        _greedy(max_tokens=10),
        _greedy(stop=("\n",)),
        _greedy(repetition_penalty=1.1),
        _greedy(frequency_penalty=0.5),
        _greedy(presence_penalty=0.5),
        _greedy(temperature=0.5, seed=1),
        _greedy(grammar='root ::= "{}"'),
        dataclasses.replace(GREEDY, family="glm47"),
        dataclasses.replace(GREEDY, tools=({"type": "function", "function": {"name": "f"}},)),
        dataclasses.replace(GREEDY, enable_thinking=False),
        dataclasses.replace(GREEDY, adapter="/store/blobs/sha256/ab12"),
    ],
)
def test_anything_that_changes_a_greedy_answer_changes_the_key(changed: GenerationInput) -> None:
    assert cache_key("acct", MODEL, changed, None) != cache_key("acct", MODEL, GREEDY, None)


@pytest.mark.parametrize(
    "changed",
    [
        _seeded(temperature=0.8),
        _seeded(top_p=0.9),
        _seeded(top_k=5),
        _seeded(seed=8),
        _seeded(max_tokens=9),
        dataclasses.replace(SEEDED, messages=({"role": "user", "content": "hello"},)),
    ],
)
def test_every_sampling_parameter_of_a_seeded_request_is_in_the_key(changed: GenerationInput) -> None:
    assert cache_key("acct", MODEL, changed, None) != cache_key("acct", MODEL, SEEDED, None)


def test_greedy_decoding_ignores_what_it_does_not_use() -> None:
    assert cache_key("acct", MODEL, _greedy(top_p=0.5, top_k=3, seed=99), None) == cache_key(
        "acct", MODEL, GREEDY, None
    )


def test_a_prompt_and_the_same_text_as_a_message_differ() -> None:
    as_message = GenerationInput(
        messages=({"role": "user", "content": GREEDY.prompt},), sampling=GREEDY.sampling
    )
    assert cache_key("acct", MODEL, as_message, None) != cache_key("acct", MODEL, GREEDY, None)
    assert canonical_input(as_message)["prompt"] is None


def test_model_and_account_scope_the_key() -> None:
    key = cache_key("acct", MODEL, GREEDY, None)
    assert cache_key("other", MODEL, GREEDY, None) != key
    assert cache_key("acct", "@cf/test/other", GREEDY, None) != key


def test_a_custom_key_replaces_the_input_but_stays_in_its_account_and_model() -> None:
    key = cache_key("acct", MODEL, GREEDY, "faq-1")
    assert cache_key("acct", MODEL, SEEDED, "faq-1") == key
    assert cache_key("other", MODEL, GREEDY, "faq-1") != key
    assert cache_key("acct", "@cf/test/other", GREEDY, "faq-1") != key
    assert cache_key("acct", MODEL, GREEDY, "faq-2") != key
    assert cache_key("acct", MODEL, GREEDY, None) != key
    tuned = dataclasses.replace(GREEDY, adapter="/store/blobs/sha256/ab12")
    assert cache_key("acct", MODEL, tuned, "faq-1") != key  # a fine-tune's answers stay its own


def test_only_deterministic_requests_are_cacheable() -> None:
    assert is_deterministic(GREEDY)
    assert is_deterministic(SEEDED)
    assert not is_deterministic(GenerationInput(prompt="x", sampling=SamplingParams(temperature=0.7)))
    assert is_deterministic(GenerationInput(prompt="x", sampling=SamplingParams(temperature=0.7, seed=0)))


# -- policy ---------------------------------------------------------------------------------------------------


def test_no_headers_means_the_default_policy() -> None:
    assert CachePolicy.from_headers({}, 300.0) == CachePolicy(ttl_s=300.0, skip=False, custom_key=None)


def test_header_names_are_case_insensitive() -> None:
    headers = {"CF-AIG-Cache-TTL": "120", "Cf-Aig-Skip-Cache": "TRUE", "CF-AIG-CACHE-KEY": " faq-1 "}
    assert CachePolicy.from_headers(headers, 300.0) == CachePolicy(ttl_s=120, skip=True, custom_key="faq-1")
    assert not CachePolicy.from_headers({SKIP_HEADER: "false"}, 300.0).skip


def test_caching_is_off_by_default_until_a_request_sends_a_ttl() -> None:
    off = CachePolicy.from_headers({}, 0.0)  # the node's default TTL is 0
    assert off == CachePolicy(ttl_s=0.0) and not off.enabled
    assert not CachePolicy.from_headers({KEY_HEADER: "faq-1"}, 0.0).enabled  # a key alone turns nothing on
    on = CachePolicy.from_headers({TTL_HEADER: "60"}, 0.0)
    assert on.ttl_s == 60 and on.enabled


def test_a_node_ttl_turns_caching_on_and_skip_turns_it_off() -> None:
    assert CachePolicy.from_headers({}, 300.0).enabled
    assert not CachePolicy.from_headers({SKIP_HEADER: "true"}, 300.0).enabled
    assert not CachePolicy.from_headers({TTL_HEADER: "60", SKIP_HEADER: "true"}, 0.0).enabled
    assert CachePolicy.from_headers({SKIP_HEADER: "false"}, 300.0).enabled


@pytest.mark.parametrize("value", ["60", "2592000", " 3600 "])
def test_a_ttl_within_a_minute_and_a_month_is_taken(value: str) -> None:
    assert CachePolicy.from_headers({TTL_HEADER: value}, 300.0).ttl_s == int(value)


@pytest.mark.parametrize(
    "value", ["59", "0", "-60", "2592001", "", " ", "abc", "60.5", "1e3", "+60", "6_0", "٣٠٠", "60s", "0x3c"]
)
def test_a_bad_ttl_is_refused_naming_the_header(value: str) -> None:
    with pytest.raises(InvalidInput, match=TTL_HEADER) as refused:
        CachePolicy.from_headers({TTL_HEADER: value}, 300.0)
    assert refused.value.param == TTL_HEADER


@pytest.mark.parametrize("value", ["", "yes", "1", "no", "maybe"])
def test_a_bad_skip_value_is_refused_naming_the_header(value: str) -> None:
    with pytest.raises(InvalidInput, match=SKIP_HEADER) as refused:
        CachePolicy.from_headers({SKIP_HEADER: value}, 300.0)
    assert refused.value.param == SKIP_HEADER


@pytest.mark.parametrize("value", ["", "   ", "k" * 1025])
def test_a_bad_custom_key_is_refused_naming_the_header(value: str) -> None:
    with pytest.raises(InvalidInput, match=KEY_HEADER) as refused:
        CachePolicy.from_headers({KEY_HEADER: value}, 300.0)
    assert refused.value.param == KEY_HEADER


# -- the answer -----------------------------------------------------------------------------------------------


def test_an_answer_is_made_from_a_live_generation_s_text_and_finish() -> None:
    finished = Finished(ANSWER.finish_reason, ANSWER.usage)
    assert CachedAnswer.of(ANSWER.text, finished, MODEL, ANSWER.created_at) == ANSWER
    before = time.time()
    assert before <= CachedAnswer.of("x", finished, MODEL).created_at <= time.time()


def test_an_answer_survives_json() -> None:
    assert CachedAnswer.from_json(ANSWER.to_json()) == ANSWER
    assert CachedAnswer.from_json(ANSWER.to_json().encode("utf-8")) == ANSWER


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '"text"',
        "{}",
        ANSWER.to_json().replace('"prompt_tokens":12', '"prompt_tokens":"12"'),
        ANSWER.to_json().replace('"prompt_tokens":12', '"prompt_tokens":true'),
        ANSWER.to_json().replace('"finish_reason":"stop"', '"finish_reason":null'),
    ],
)
def test_anything_else_is_not_an_answer(text: str) -> None:
    with pytest.raises(ValueError):
        CachedAnswer.from_json(text)


# -- the database store ---------------------------------------------------------------------------------------


async def test_the_database_store_keeps_an_answer_until_it_expires(database: Database) -> None:
    clock = Clock()
    store = await DatabaseResponseStore.open(database, clock)
    await DatabaseResponseStore.open(database, clock)  # the schema is idempotent
    assert await store.get("k") is None
    await store.put("k", "acct", ANSWER, 60.0)
    assert await store.get("k") == ANSWER
    clock.now += 59.9
    assert await store.get("k") == ANSWER
    clock.now += 0.1
    assert await store.get("k") is None
    assert await store.purge_expired() == 1
    assert await database.fetch_all("SELECT key FROM response_cache") == []


async def test_the_database_store_overwrites_an_entry(database: Database) -> None:
    clock = Clock()
    store = await DatabaseResponseStore.open(database, clock)
    await store.put("k", "acct", ANSWER, 60.0)
    newer = dataclasses.replace(ANSWER, text="newer")
    await store.put("k", "acct", newer, 600.0)
    clock.now += 300.0
    assert await store.get("k") == newer
    assert await store.purge_expired() == 0
    row = await database.fetch_one("SELECT account_id, model FROM response_cache WHERE key = ?", ("k",))
    assert row == ("acct", MODEL)


# -- the Redis store ------------------------------------------------------------------------------------------


async def test_the_redis_store_sets_an_answer_with_its_ttl(redis_url: str) -> None:
    prefix = f"test:{uuid.uuid4().hex}:"
    store = RedisResponseStore(redis_url, prefix=prefix)
    raw = redis.asyncio.Redis.from_url(redis_url)
    try:
        assert await store.get("k") is None
        await store.put("k", "acct", ANSWER, 120.0)
        assert await store.get("k") == ANSWER
        assert 119 <= await raw.ttl(prefix + "k") <= 120
        await store.put("short", "acct", ANSWER, 0.2)  # Redis counts whole seconds: rounded up, never 0
        assert await raw.ttl(prefix + "short") == 1
        assert await store.purge_expired() == 0
    finally:
        await raw.aclose()
        await store.close()


async def test_redis_expires_an_entry(redis_url: str) -> None:
    store = RedisResponseStore(redis_url, prefix=f"test:{uuid.uuid4().hex}:")
    try:
        await store.put("k", "acct", ANSWER, 1.0)
        await asyncio.sleep(1.1)
        assert await store.get("k") is None
    finally:
        await store.close()


async def test_a_corrupt_entry_is_a_miss(redis_url: str) -> None:
    prefix = f"test:{uuid.uuid4().hex}:"
    raw = redis.asyncio.Redis.from_url(redis_url)
    cache = ResponseCache(RedisResponseStore(redis_url, prefix=prefix), 300.0)
    try:
        key = cache_key("acct", MODEL, GREEDY, None)
        await raw.set(prefix + key, b"\xff not json")
        assert await cache.lookup_key(key) is None
    finally:
        await raw.aclose()
        await cache.close()


async def test_an_unreachable_store_never_fails_a_request() -> None:
    cache = ResponseCache(RedisResponseStore(_closed_port_url()), 300.0)
    key = cache.key_for("acct", MODEL, GREEDY, CachePolicy(ttl_s=300.0))
    assert key is not None
    try:
        assert await cache.lookup_key(key) is None
        await cache.store_key(key, "acct", ANSWER, 300.0)
        assert await cache.purge_expired() == 0
    finally:
        await cache.close()


async def test_an_outage_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    cache = ResponseCache(RedisResponseStore(_closed_port_url()), 300.0)
    key = cache_key("acct", MODEL, GREEDY, None)
    try:
        with caplog.at_level(logging.WARNING, logger="cirrus.cache.response_cache"):
            for _ in range(3):
                assert await cache.lookup_key(key) is None
                await cache.store_key(key, "acct", ANSWER, 300.0)
        ours = [record for record in caplog.records if record.name == "cirrus.cache.response_cache"]
        assert [record.getMessage() for record in ours] == ["response cache: read failed, serving as a miss"]
    finally:
        await cache.close()


# -- the response cache ---------------------------------------------------------------------------------------


async def test_a_miss_then_a_hit_from_the_database(database: Database) -> None:
    cache = ResponseCache(await DatabaseResponseStore.open(database), 0.0)
    policy = CachePolicy.from_headers({TTL_HEADER: "60"}, cache.default_ttl_s)
    key = cache.key_for("acct", MODEL, GREEDY, policy)
    assert key is not None and key == cache_key("acct", MODEL, GREEDY, None)
    assert await cache.lookup_key(key) is None
    await cache.store_key(key, "acct", ANSWER, policy.ttl_s)
    assert await cache.lookup_key(key) == ANSWER
    other = cache.key_for("other", MODEL, GREEDY, policy)
    assert other is not None and await cache.lookup_key(other) is None


async def test_a_custom_key_reads_and_writes_its_own_entry(database: Database) -> None:
    cache = ResponseCache(await DatabaseResponseStore.open(database), 300.0)
    policy = CachePolicy.from_headers({KEY_HEADER: "faq-1"}, cache.default_ttl_s)
    key = cache.key_for("acct", MODEL, SEEDED, policy)
    assert key is not None and key == cache_key("acct", MODEL, SEEDED, "faq-1")
    await cache.store_key(key, "acct", ANSWER, policy.ttl_s)
    assert await cache.lookup_key(key) == ANSWER
    assert await cache.lookup_key(cache_key("acct", MODEL, SEEDED, None)) is None


RANDOM = GenerationInput(prompt="x", sampling=SamplingParams(temperature=0.7))


async def test_while_the_shared_redis_is_skipped_the_cache_misses_and_stores_nothing(redis_url: str) -> None:
    """One breaker for the rate limiter and the cache: a failure either sees makes both skip Redis."""
    clock, prefix = FakeClock(), f"test:{uuid.uuid4().hex}:"
    shared = SharedRedis(redis_url, probe_after_s=2.0, clock=clock)
    cache = ResponseCache(RedisResponseStore(shared, prefix=prefix), 300.0)
    raw = redis.asyncio.Redis.from_url(redis_url)
    stored, skipped = cache_key("acct", MODEL, GREEDY, None), cache_key("acct", MODEL, SEEDED, None)
    try:
        await cache.store_key(stored, "acct", ANSWER, 300.0)
        shared.breaker.failed()  # as when the rate limiter's call timed out
        assert await cache.lookup_key(stored) is None  # there, yet not asked for
        await cache.store_key(skipped, "acct", ANSWER, 300.0)
        assert await raw.exists(prefix + skipped) == 0
        clock.advance(2.0)
        assert await cache.lookup_key(stored) == ANSWER  # the probe, answered: the cache is back
    finally:
        await raw.aclose()
        await cache.close()
        await shared.close()


@pytest.mark.parametrize(
    ("inputs", "headers", "default_ttl_s"),
    [
        (GREEDY, {}, 0.0),  # caching off: no TTL from the node or the request
        (GREEDY, {SKIP_HEADER: "true"}, 300.0),
        (GREEDY, {TTL_HEADER: "60", SKIP_HEADER: "true"}, 0.0),
        (RANDOM, {}, 300.0),  # not deterministic
        (RANDOM, {TTL_HEADER: "60", KEY_HEADER: "faq-1"}, 0.0),  # a custom key does not make it deterministic
    ],
)
def test_off_skipped_and_uncacheable_requests_bypass_the_cache(
    inputs: GenerationInput, headers: dict[str, str], default_ttl_s: float
) -> None:
    cache = ResponseCache(RedisResponseStore(_closed_port_url()), default_ttl_s)  # never connects
    policy = CachePolicy.from_headers(headers, default_ttl_s)
    assert cache.key_for("acct", MODEL, inputs, policy) is None


async def test_only_whole_answers_are_stored(redis_url: str) -> None:
    cache = ResponseCache(RedisResponseStore(redis_url, prefix=f"test:{uuid.uuid4().hex}:"), 300.0)
    key = cache_key("acct", MODEL, GREEDY, None)
    try:
        for reason in ("cancelled", "error"):
            await cache.store_key(key, "acct", dataclasses.replace(ANSWER, finish_reason=reason), 300.0)
            assert await cache.lookup_key(key) is None
        truncated = dataclasses.replace(ANSWER, finish_reason="length")
        await cache.store_key(key, "acct", truncated, 300.0)
        assert await cache.lookup_key(key) == truncated
    finally:
        await cache.close()


# -- replay ---------------------------------------------------------------------------------------------------


async def _replayed(answer: CachedAnswer, chunk_chars: int = 32) -> list[GenerationEvent]:
    return [event async for event in replay(answer, chunk_chars)]


@pytest.mark.parametrize("chunk_chars", [1, 5, 32, 1000])
async def test_a_replay_reproduces_the_text_and_usage_exactly(chunk_chars: int) -> None:
    events = await _replayed(ANSWER, chunk_chars)
    pieces = [event for event in events if isinstance(event, TextDelta)]
    assert "".join(piece.text for piece in pieces) == ANSWER.text
    assert all(0 < len(piece.text) <= chunk_chars for piece in pieces)
    assert events[-1] == Finished(ANSWER.finish_reason, ANSWER.usage)
    assert events[:-1] == pieces


async def test_an_empty_answer_replays_as_just_its_finish() -> None:
    empty = dataclasses.replace(ANSWER, text="", finish_reason="length")
    assert await _replayed(empty) == [Finished("length", ANSWER.usage)]


async def test_replay_refuses_empty_chunks() -> None:
    with pytest.raises(ValueError):
        await _replayed(ANSWER, 0)


async def test_a_replay_makes_the_same_answer_again() -> None:
    events = await _replayed(ANSWER, 4)
    text = "".join(event.text for event in events if isinstance(event, TextDelta))
    finished = events[-1]
    assert isinstance(finished, Finished)
    assert CachedAnswer.of(text, finished, MODEL, ANSWER.created_at) == ANSWER
