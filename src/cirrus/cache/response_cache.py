"""AI Gateway's response cache: whole answers to deterministic requests, per account and model.

A store error never fails a request: it is logged and the request is served as a miss (or simply not stored).
An outage is logged once as a warning when it starts, not once per request. Joining identical requests in
flight is the gateway's job (`cirrus.gateway.inflight`), not the cache's.
"""

import logging

from cirrus.cache.answer import CACHEABLE_FINISH_REASONS, CachedAnswer
from cirrus.cache.keys import cache_key, is_deterministic
from cirrus.cache.policy import CachePolicy
from cirrus.cache.store import ResponseStore
from cirrus.runtime.params import GenerationInput

log = logging.getLogger(__name__)


class ResponseCache:
    def __init__(self, store: ResponseStore, default_ttl_s: float) -> None:
        self._store = store
        self.default_ttl_s = default_ttl_s  # the node's TTL for requests without `cf-aig-cache-ttl`
        self._store_healthy = True

    def key_for(
        self, account_id: str, model: str, inputs: GenerationInput, policy: CachePolicy
    ) -> str | None:
        """The entry's key, or None when the request bypasses the cache (off, skipped or not deterministic)."""
        if not policy.enabled or not is_deterministic(inputs):
            return None
        return cache_key(account_id, model, inputs, policy.custom_key)

    async def lookup_key(self, key: str) -> CachedAnswer | None:
        """The answer stored under a key from `key_for` or `cache_key`; None on a miss or a store error."""
        try:
            cached = await self._store.get(key)
        except Exception:
            self._store_failed("read failed, serving as a miss")
            return None
        self._store_healthy = True
        return cached

    async def store_key(self, key: str, account_id: str, answer: CachedAnswer, ttl_s: float) -> None:
        """Store a whole answer ("stop" or "length"; anything else is ignored); never raises on a store error."""
        if answer.finish_reason not in CACHEABLE_FINISH_REASONS:
            return
        try:
            await self._store.put(key, account_id, answer, ttl_s)
        except Exception:
            self._store_failed("write failed, answer not cached")
            return
        self._store_healthy = True

    async def purge_expired(self) -> int:
        try:
            purged = await self._store.purge_expired()
        except Exception:
            self._store_failed("purge failed")
            return 0
        self._store_healthy = True
        return purged

    async def close(self) -> None:
        await self._store.close()

    def _store_failed(self, what: str) -> None:
        level = logging.WARNING if self._store_healthy else logging.DEBUG
        log.log(level, "response cache: %s", what, exc_info=True)
        self._store_healthy = False
