"""The response cache in Redis, shared by every gateway that points at it; Redis expires entries itself.

Every call goes through the gateway's `SharedRedis`: one bounded wait, then skipped while Redis is down or
frozen (RedisUnavailable), which `ResponseCache` serves as a miss that stores nothing.
"""

import math

from cirrus.cache.answer import CachedAnswer
from cirrus.resilience.shared_redis import SharedRedis

DEFAULT_PREFIX = "cirrus:cache:"


class RedisResponseStore:
    def __init__(self, redis: str | SharedRedis, prefix: str = DEFAULT_PREFIX) -> None:
        """A `redis://` URL (a Redis of its own), or the gateway's `SharedRedis`, left open by `close`."""
        self._shared = SharedRedis(redis) if isinstance(redis, str) else redis
        self._owns_shared = isinstance(redis, str)
        self._redis = self._shared.client()
        self._prefix = prefix

    async def get(self, key: str) -> CachedAnswer | None:
        value: bytes | None = await self._shared.run(lambda: self._redis.get(self._prefix + key))
        return None if value is None else CachedAnswer.from_json(value)

    async def put(self, key: str, account_id: str, answer: CachedAnswer, ttl_s: float) -> None:
        document, expiry_s = answer.to_json(), max(1, math.ceil(ttl_s))
        await self._shared.run(lambda: self._redis.set(self._prefix + key, document, ex=expiry_s))

    async def purge_expired(self) -> int:
        return 0

    async def close(self) -> None:
        await self._redis.aclose()
        if self._owns_shared:
            await self._shared.close()
