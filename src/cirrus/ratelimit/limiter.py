"""Per-token, per-model rate limits: requests and tokens per minute, counted in memory or in a shared Redis.

Fail open: when the storage cannot be reached (Redis down or silent past its timeout) requests are admitted
uncounted and tokens go uncharged, so an outage of the limiter never becomes an outage of inference. The
outage is logged as a warning when it starts and again when it ends, not once per request.
"""

import asyncio
import logging
import time

from limits import RateLimitItem, RateLimitItemPerMinute
from limits.aio.strategies import SlidingWindowCounterRateLimiter
from limits.errors import StorageError
from limits.util import WindowStats

from cirrus.auth.principal import Principal
from cirrus.catalog.spec import ModelSpec
from cirrus.errors import RateLimited
from cirrus.ratelimit.policy import EffectiveLimits, effective_limits
from cirrus.ratelimit.status import UNKNOWN_STATUS, RateStatus, WindowStatus, format_seconds
from cirrus.ratelimit.storage import open_storage

logger = logging.getLogger(__name__)

WINDOW_S = 60.0
MIN_RETRY_AFTER_S = 0.1
Key = tuple[str, str]


class RateLimiter:
    """Counts each (token, model) pair's requests and tokens against its effective per-minute limits."""

    def __init__(self, storage_uri: str) -> None:
        self._opened = open_storage(storage_uri)
        # Sliding window counter: O(1) storage and one Lua call whatever the limit or cost; a moving window
        # is exact but keeps one entry per request and per token (a 100k tokens/min limit: 100k entries).
        self._strategy = SlidingWindowCounterRateLimiter(self._opened.storage)
        self._outage = OutageLog()

    async def admit(self, principal: Principal, spec: ModelSpec) -> RateStatus:
        """Count one request, or raise RateLimited (counting nothing) when a limit is reached."""
        limits = effective_limits(principal, spec)
        try:
            status = await self._admit(limits, (principal.limit_key, spec.id))
        except StorageError as error:
            self._outage.failed(error)
            return UNKNOWN_STATUS
        self._outage.succeeded()
        return status

    async def consume_tokens(self, principal: Principal, spec: ModelSpec, tokens: int) -> None:
        """Charge an answer's tokens; a charge larger than what is left uses up the window and no more."""
        limit = effective_limits(principal, spec).tokens_per_minute
        if limit is None or tokens <= 0:
            return
        item = _tokens_item(limit)
        key = (principal.limit_key, spec.id)
        try:
            if not await self._strategy.hit(item, *key, cost=min(tokens, limit)):
                await self._exhaust(item, key)
        except StorageError as error:
            self._outage.failed(error)

    async def close(self) -> None:
        await self._opened.close()

    async def _admit(self, limits: EffectiveLimits, key: Key) -> RateStatus:
        # Two round trips: read both windows together, then count the request; a refused one is never counted.
        requests_item = _requests_item(limits.requests_per_minute)
        requests, tokens = await self._windows(requests_item, limits.tokens_per_minute, key)
        if tokens is not None and tokens.remaining == 0:
            used_up = _used_up(tokens)
            raise _refusal("tokens", used_up, key, RateStatus(requests, used_up))
        if requests.remaining == 0 or not await self._strategy.hit(requests_item, *key):
            used_up = _used_up(requests)
            raise _refusal("requests", used_up, key, RateStatus(used_up, tokens))
        return RateStatus(_after_hit(requests), tokens)

    async def _windows(
        self, requests_item: RateLimitItem, tokens_per_minute: int | None, key: Key
    ) -> tuple[WindowStatus, WindowStatus | None]:
        if tokens_per_minute is None:
            return await self._window(requests_item, key), None
        tokens_item = _tokens_item(tokens_per_minute)
        return await asyncio.gather(self._window(requests_item, key), self._window(tokens_item, key))

    async def _window(self, item: RateLimitItem, key: Key) -> WindowStatus:
        stats = await self._strategy.get_window_stats(item, *key)
        return WindowStatus(item.amount, stats.remaining, _reset_s(stats, item))

    async def _exhaust(self, item: RateLimitItem, key: Key) -> None:
        remaining = (await self._strategy.get_window_stats(item, *key)).remaining
        if remaining > 0:
            await self._strategy.hit(item, *key, cost=remaining)


class OutageLog:
    """Warns once when the storage starts failing and once when it answers again."""

    def __init__(self) -> None:
        self._failing = False

    def failed(self, error: StorageError) -> None:
        if not self._failing:
            self._failing = True
            logger.warning("rate limit storage unreachable, admitting requests unlimited: %s", error)

    def succeeded(self) -> None:
        if self._failing:
            self._failing = False
            logger.warning("rate limit storage reachable again, limits enforced")


def _requests_item(limit: int) -> RateLimitItem:
    return RateLimitItemPerMinute(limit, namespace="cirrus-requests")


def _tokens_item(limit: int) -> RateLimitItem:
    return RateLimitItemPerMinute(limit, namespace="cirrus-tokens")


def _reset_s(stats: WindowStats, item: RateLimitItem) -> float:
    reset_s = stats.reset_time - time.time()
    if reset_s > 0 or stats.remaining == item.amount:
        return max(reset_s, 0.0)
    # In use yet reset already: the library's modulo turned a full period (a window just begun) into 0.
    return WINDOW_S


def _after_hit(window: WindowStatus) -> WindowStatus:
    # An empty window reports no reset; the slot just taken frees within one window.
    reset_s = window.reset_s if window.remaining < window.limit else WINDOW_S
    return WindowStatus(window.limit, window.remaining - 1, reset_s)


def _used_up(window: WindowStatus) -> WindowStatus:
    # Never "retry in 0s": a refusal whose window reports a reset already past (a race) says a moment.
    return WindowStatus(window.limit, 0, max(window.reset_s, MIN_RETRY_AFTER_S))


def _refusal(kind: str, window: WindowStatus, key: Key, status: RateStatus) -> RateLimited:
    return RateLimited(
        f"Rate limit reached for model {key[1]}: {window.limit} {kind} per minute. "
        f"Retry in {format_seconds(window.reset_s)}.",
        limit=kind,
        retry_after_s=window.reset_s,
        headers=status.headers(),
    )
