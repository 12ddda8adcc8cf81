"""Requests and tokens per minute for (token, model) keys, counted in one `limits` storage.

The rate limiter keeps two: the shared one (Redis, or memory on a lone gateway) and this gateway's own memory,
which counts while a shared Redis is skipped.
"""

import asyncio
import time

from limits import RateLimitItem, RateLimitItemPerMinute
from limits.aio.storage import Storage
from limits.aio.strategies import SlidingWindowCounterRateLimiter
from limits.util import WindowStats

from cirrus.errors import RateLimited
from cirrus.ratelimit.policy import EffectiveLimits
from cirrus.ratelimit.status import RateStatus, WindowStatus, format_seconds

WINDOW_S = 60.0
MIN_RETRY_AFTER_S = 0.1
Key = tuple[str, str]


class WindowCounter:
    def __init__(self, storage: Storage) -> None:
        # Sliding window counter: O(1) storage and one Lua call whatever the limit or cost; a moving window
        # is exact but keeps one entry per request and per token (a 100k tokens/min limit: 100k entries).
        self._strategy = SlidingWindowCounterRateLimiter(storage)

    async def admit(self, limits: EffectiveLimits, key: Key) -> RateStatus:
        """Count one request, or raise RateLimited (counting nothing) when a limit is reached."""
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

    async def charge(self, tokens_per_minute: int, key: Key, tokens: int) -> None:
        """A charge larger than what is left uses up the window and no more."""
        item = _tokens_item(tokens_per_minute)
        if not await self._strategy.hit(item, *key, cost=min(tokens, tokens_per_minute)):
            await self._exhaust(item, key)

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
