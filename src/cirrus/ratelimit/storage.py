"""The `limits` storages the rate limiter counts in: this process's memory, or the gateway's shared Redis."""

from urllib.parse import urlparse

from limits.aio.storage import MemoryStorage, RedisStorage, Storage

from cirrus.resilience.shared_redis import SharedRedis, is_redis_url


def memory_storage() -> Storage:
    return MemoryStorage()


def redis_storage(redis: SharedRedis) -> Storage:
    """Errors come through unwrapped (redis-py's own), for `SharedRedis.run` to tell an outage from a mistake."""
    # `limits` types extra options as scalars, but hands them unchanged to redis-py, which takes a pool.
    return RedisStorage(
        redis.url,
        implementation="redispy",
        connection_pool=redis.pool,  # type: ignore[arg-type]
    )


def uses_redis(uri: str) -> bool:
    """True for `redis://host:port/db` (or rediss://), False for `memory://`; ValueError for anything else."""
    if is_redis_url(uri):
        return True
    scheme = urlparse(uri).scheme
    if scheme == "memory":
        return False
    raise ValueError(f"rate limit storage must be memory:// or redis://host:port/db, not a {scheme}:// URI")
