"""AI Gateway's response cache: keys, per-request policy, stores and replay."""

from cirrus.cache.answer import CACHEABLE_FINISH_REASONS, CachedAnswer
from cirrus.cache.db_store import DatabaseResponseStore
from cirrus.cache.keys import cache_key, is_deterministic
from cirrus.cache.policy import STATUS_HEADER, CachePolicy
from cirrus.cache.redis_store import RedisResponseStore
from cirrus.cache.replay import replay
from cirrus.cache.response_cache import ResponseCache
from cirrus.cache.store import ResponseStore

__all__ = [
    "CACHEABLE_FINISH_REASONS",
    "STATUS_HEADER",
    "CachePolicy",
    "CachedAnswer",
    "DatabaseResponseStore",
    "RedisResponseStore",
    "ResponseCache",
    "ResponseStore",
    "cache_key",
    "is_deterministic",
    "replay",
]
