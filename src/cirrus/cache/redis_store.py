"""The response cache in Redis, shared by every gateway that points at it; Redis expires entries itself."""

import math

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from cirrus.cache.answer import CachedAnswer

DEFAULT_PREFIX = "cirrus:cache:"
DEFAULT_TIMEOUT_S = 0.5


class RedisResponseStore:
    def __init__(self, url: str, prefix: str = DEFAULT_PREFIX, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        # A cache must fail fast: one quick retry (a connection Redis dropped), then the request runs as a miss,
        # where redis-py's default would back off for seconds.
        self._redis = Redis.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 1),
        )
        self._prefix = prefix

    async def get(self, key: str) -> CachedAnswer | None:
        value: bytes | None = await self._redis.get(self._prefix + key)
        return None if value is None else CachedAnswer.from_json(value)

    async def put(self, key: str, account_id: str, answer: CachedAnswer, ttl_s: float) -> None:
        await self._redis.set(self._prefix + key, answer.to_json(), ex=max(1, math.ceil(ttl_s)))

    async def purge_expired(self) -> int:
        return 0

    async def close(self) -> None:
        await self._redis.aclose()
