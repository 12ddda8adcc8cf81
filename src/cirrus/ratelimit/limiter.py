"""Per-token, per-model rate limits: requests and tokens per minute, counted in memory or in a shared Redis.

Redis down or silent: the shared Redis is skipped after one bounded failure (`SharedRedis`), and meanwhile each
gateway counts in its own memory, so a caller keeps its limits per gateway (N gateways: up to N times the shared
limit) rather than none, and an outage of the limiter never becomes an outage of inference. Token charges the
shared count misses are reported (`on_charge_dropped`). Counts start afresh in memory when an outage starts and
in Redis's window when it ends: across each switch a caller may get up to one more window's worth.
"""

import logging
from collections.abc import Callable

from cirrus.auth.principal import Principal
from cirrus.catalog.spec import ModelSpec
from cirrus.ratelimit.counter import Key, WindowCounter
from cirrus.ratelimit.policy import EffectiveLimits, effective_limits
from cirrus.ratelimit.status import RateStatus
from cirrus.ratelimit.storage import memory_storage, redis_storage, uses_redis
from cirrus.resilience.shared_redis import RedisUnavailable, SharedRedis

log = logging.getLogger(__name__)

ChargeDropped = Callable[[str, int], None]  # (model, tokens) the shared count never saw


class RateLimiter:
    """Counts each (token, model) pair's requests and tokens against its effective per-minute limits."""

    def __init__(self, storage: str | SharedRedis, *, on_charge_dropped: ChargeDropped | None = None) -> None:
        """`memory://`, `redis://host:port/db` (a Redis of its own), or the gateway's `SharedRedis` (left open
        by `close`: whoever opened it closes it)."""
        self._local = WindowCounter(memory_storage())
        redis = SharedRedis(storage) if isinstance(storage, str) and uses_redis(storage) else storage
        self._shared = SharedCounter(redis) if isinstance(redis, SharedRedis) else None
        self._owns_redis = isinstance(storage, str)
        self._on_charge_dropped = on_charge_dropped

    async def admit(self, principal: Principal, spec: ModelSpec) -> RateStatus:
        """Count one request, or raise RateLimited (counting nothing) when a limit is reached."""
        limits, key = effective_limits(principal, spec), _key(principal, spec)
        if self._shared is not None:
            try:
                return await self._shared.admit(limits, key)
            except RedisUnavailable as error:
                log.debug("rate limit counted on this gateway: %s", error)
        return await self._local.admit(limits, key)

    async def consume_tokens(self, principal: Principal, spec: ModelSpec, tokens: int) -> None:
        """Charge an answer's tokens; a charge larger than what is left uses up the window and no more."""
        limit = effective_limits(principal, spec).tokens_per_minute
        if limit is None or tokens <= 0:
            return
        key = _key(principal, spec)
        if self._shared is not None:
            try:
                await self._shared.charge(limit, key, tokens)
                return
            except RedisUnavailable as error:
                log.debug("%d tokens charged on this gateway only: %s", tokens, error)
                if self._on_charge_dropped is not None:
                    self._on_charge_dropped(spec.id, tokens)
        await self._local.charge(limit, key, tokens)

    async def close(self) -> None:
        if self._shared is not None and self._owns_redis:
            await self._shared.redis.close()


class SharedCounter:
    """The counts every gateway sees, each call bounded and skipped while Redis is down (RedisUnavailable)."""

    def __init__(self, redis: SharedRedis) -> None:
        self.redis = redis
        self._counter = WindowCounter(redis_storage(redis))

    async def admit(self, limits: EffectiveLimits, key: Key) -> RateStatus:
        return await self.redis.run(lambda: self._counter.admit(limits, key))

    async def charge(self, tokens_per_minute: int, key: Key, tokens: int) -> None:
        await self.redis.run(lambda: self._counter.charge(tokens_per_minute, key, tokens))


def _key(principal: Principal, spec: ModelSpec) -> Key:
    return principal.limit_key, spec.id
