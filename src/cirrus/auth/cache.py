"""Remembers what each token secret proved for a few seconds, so a request need not read the database.

Misses are remembered too, so a flood of bad tokens costs no queries; the cache is bounded so that flood
cannot grow it without limit. A revoked token may keep working for up to `ttl_s` in other gateways.
"""

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from cirrus.auth.principal import Principal
from cirrus.auth.secrets import hash_secret

DEFAULT_MAX_ENTRIES = 10_000


class Authenticator(Protocol):
    async def authenticate(self, secret: str) -> Principal | None: ...


class CachedAuthenticator:
    def __init__(
        self,
        store: Authenticator,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
        *,
        wall_clock: Callable[[], float] = time.time,
        max_entries: int = DEFAULT_MAX_ENTRIES,
    ) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._clock = clock
        self._wall_clock = wall_clock
        self._max_entries = max_entries
        # secret hash -> (when it was looked up, what it proved); oldest first, as every entry shares one ttl
        self._entries: OrderedDict[str, tuple[float, Principal | None]] = OrderedDict()

    async def authenticate(self, secret: str) -> Principal | None:
        if self._ttl_s <= 0:
            return await self._store.authenticate(secret)
        key = hash_secret(secret)
        now = self._clock()
        self._drop_stale(now)
        entry = self._entries.get(key)
        if entry is None:
            principal = await self._store.authenticate(secret)
            self._remember(key, self._clock(), principal)
        else:
            principal = entry[1]
        if principal is not None and principal.expired(self._wall_clock()):
            return None
        return principal

    def clear(self) -> None:
        """Forget everything, e.g. after this gateway revoked a token itself."""
        self._entries.clear()

    def _remember(self, key: str, now: float, principal: Principal | None) -> None:
        self._entries.pop(key, None)
        self._entries[key] = (now, principal)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)

    def _drop_stale(self, now: float) -> None:
        while self._entries:
            stored_at = next(iter(self._entries.values()))[0]
            if now - stored_at < self._ttl_s:
                return
            self._entries.popitem(last=False)
