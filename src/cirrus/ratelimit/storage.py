"""Open the `limits` storage a URI names: this process's memory, or a Redis that many gateways share."""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlparse

from limits.aio.storage import MemoryStorage, RedisStorage, Storage
from redis.asyncio import ConnectionPool
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

# A rate limit check must never hold a request for long: Redis answers in well under a millisecond, so a
# silent one is treated as down (and the request admitted) after this.
REDIS_TIMEOUT_S = 0.5
REDIS_SCHEMES = ("redis", "rediss")


@dataclass(frozen=True)
class OpenedStorage:
    storage: Storage
    close: Callable[[], Awaitable[None]]


def open_storage(uri: str) -> OpenedStorage:
    """`memory://` or `redis://host:port/db`; storage errors surface as `limits.errors.StorageError`."""
    scheme = urlparse(uri).scheme
    if scheme == "memory":
        return OpenedStorage(MemoryStorage(wrap_exceptions=True), _nothing_to_close)
    if scheme in REDIS_SCHEMES:
        return _open_redis(uri)
    raise ValueError(f"rate limit storage must be memory:// or redis://host:port/db, not a {scheme}:// URI")


def _open_redis(uri: str) -> OpenedStorage:
    # Our own pool, so close() can release its connections and so a down Redis costs one quick retry (for a
    # connection Redis dropped) instead of redis-py's default three with backoff of up to seconds.
    pool = ConnectionPool.from_url(
        uri,
        socket_timeout=REDIS_TIMEOUT_S,
        socket_connect_timeout=REDIS_TIMEOUT_S,
        retry=Retry(NoBackoff(), 1),
    )
    # `limits` types extra options as scalars, but hands them unchanged to redis-py, which takes a pool.
    storage = RedisStorage(
        uri,
        wrap_exceptions=True,
        implementation="redispy",
        connection_pool=pool,  # type: ignore[arg-type]
    )
    return OpenedStorage(storage, pool.aclose)


async def _nothing_to_close() -> None:
    return None
