"""The Redis a gateway shares with its peers, behind one deadline per call and one circuit breaker.

Why: a frozen Redis does not refuse, it stays silent, and a socket timeout plus a retry made every request wait
1 s. Here every call (its retry included) gets one bound, `timeout_s`; its first failure opens the breaker, and
while it is open every caller skips Redis at once (the rate limiter counts per gateway, the response cache
misses) until one call probes it again after `probe_after_s`. The rate limiter and the response cache see the
same server, so they share one `SharedRedis`: what one learns, the other need not pay for.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar
from urllib.parse import urlparse

from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ReadOnlyError, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from cirrus.resilience import BreakerState, CircuitBreaker

T = TypeVar("T")
StateListener = Callable[[str, BreakerState], None]

log = logging.getLogger(__name__)

# Redis answers in well under a millisecond; a loaded gateway's event loop can still stall for tens of ms, so
# the bound leaves room for that and stays far below the 1 s (0.5 s timeout plus one retry) it replaces.
DEFAULT_TIMEOUT_S = 0.25
DEFAULT_PROBE_AFTER_S = 2.0
REDIS_SCHEMES = ("redis", "rediss")
BREAKER_NAME = "redis"

# Errors that say the server is gone, silent or unusable, as opposed to one command's mistake (a wrong type).
OUTAGE_ERRORS = (OSError, RedisConnectionError, RedisTimeoutError, ReadOnlyError)


class RedisUnavailable(Exception):
    """Redis was skipped (its breaker is open) or did not answer within its deadline: use the fallback."""


def is_redis_url(url: str) -> bool:
    return urlparse(url).scheme in REDIS_SCHEMES


def is_outage(error: BaseException) -> bool:
    """Counts against the breaker; builtin TimeoutError (the deadline's) is an OSError."""
    return isinstance(error, OUTAGE_ERRORS)


class SharedRedis:
    """One connection pool, one deadline per call, one breaker; closed by whoever opened it."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        probe_after_s: float = DEFAULT_PROBE_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
        on_change: StateListener | None = None,
    ) -> None:
        if not is_redis_url(url):
            raise ValueError(f"a shared Redis needs a redis:// or rediss:// URL, not {_where(url)!r}")
        self.url = url
        self.timeout_s = timeout_s
        # The socket timeouts only stop a lone call from hanging; `run`'s deadline is the bound that counts.
        # One retry without backoff fits in it and heals a connection Redis dropped (a restart) at no cost.
        self.pool = ConnectionPool.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry=Retry(NoBackoff(), 1)
        )
        self.breaker = CircuitBreaker(
            BREAKER_NAME, reset_after_s=probe_after_s, clock=clock, on_change=self._changed
        )
        self._listener = on_change
        self._last_error: BaseException | None = None
        self._probing = False

    def client(self) -> Redis:
        """A client on the shared pool; closing it leaves the pool open."""
        return Redis(connection_pool=self.pool)

    async def run(self, work: Callable[[], Awaitable[T]]) -> T:
        """Run `work` (Redis calls only) within the deadline, unless the breaker skips it. Raise
        RedisUnavailable for a skip or any Redis failure; anything else `work` raises passes through."""
        if not self.breaker.allow():
            raise RedisUnavailable(f"Redis at {_where(self.url)} skipped: it failed recently")
        try:
            result = await self._bounded(work)
        except asyncio.CancelledError:
            self._abandoned()
            raise
        except (RedisError, OSError) as error:
            if is_outage(error):
                self.breaker.failed()
            else:
                self.breaker.succeeded()  # Redis answered: the command's own mistake, for this call only
            raise RedisUnavailable(f"Redis at {_where(self.url)} failed: {_describe(error)}") from error
        except Exception:
            self.breaker.succeeded()  # Redis answered; the error is the caller's (a refusal, a corrupt entry)
            raise
        self.breaker.succeeded()
        return result

    async def close(self) -> None:
        await self.pool.aclose()

    async def _bounded(self, work: Callable[[], Awaitable[T]]) -> T:
        try:
            async with asyncio.timeout(self.timeout_s):
                return await work()
        except BaseException as error:
            self._last_error = error
            raise

    def _abandoned(self) -> None:
        """The caller left (client gone, request deadline): that says nothing about Redis, unless this call was
        the probe, whose answer now never comes; then the next probe is due after a whole period."""
        if self.breaker.state is BreakerState.HALF_OPEN:
            self.breaker.failed()

    def _changed(self, name: str, state: BreakerState) -> None:
        self._log_change(state)
        self._probing = state is BreakerState.HALF_OPEN
        if self._listener is not None:
            self._listener(name, state)

    def _log_change(self, state: BreakerState) -> None:
        """A warning when an outage starts and one when it ends; a probe that fails again is a debug line."""
        where = _where(self.url)
        if state is BreakerState.OPEN:
            cause = "skipped" if self._last_error is None else _describe(self._last_error)
            log.log(
                logging.DEBUG if self._probing else logging.WARNING,
                "Redis at %s unreachable (%s): rate limits count per gateway and the response cache is off "
                "until it answers; probing it again in %.1fs",
                where,
                cause,
                self.breaker.retry_after_s(),
            )
        elif state is BreakerState.CLOSED:
            log.warning("Redis at %s answers again: shared rate limits and response cache are back", where)


def _where(url: str) -> str:
    """host:port/db, never the password a URL may carry."""
    parsed = urlparse(url)
    return f"{parsed.hostname}:{parsed.port or 6379}{parsed.path}"


def _describe(error: BaseException) -> str:
    if isinstance(error, TimeoutError):
        return "no answer within the deadline"
    return f"{type(error).__name__}: {error}"
