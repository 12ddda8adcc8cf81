"""Remembers what each token secret proved for a few seconds, so a request need not read the database.

Misses are remembered too, so a flood of bad tokens costs no queries; the cache is bounded so that flood
cannot grow it without limit. A revoked token may keep working for up to `ttl_s` in other gateways.

Stale if error: past its `ttl_s` an answer is kept `stale_if_error_s` longer, and used only when the store is
unavailable (`DependencyUnavailable`). So callers this gateway served recently keep being served through a
database outage, at a price: a token revoked just before the outage keeps working until its answer is
`ttl_s + stale_if_error_s` old. A secret with no answer kept fails closed: the store's 503, never a guess.
"""

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from cirrus.auth.principal import Principal
from cirrus.auth.secrets import hash_secret
from cirrus.errors import DependencyUnavailable

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
        stale_if_error_s: float = 0.0,
    ) -> None:
        self._store = store
        self._ttl_s = max(0.0, ttl_s)
        self._keep_s = self._ttl_s + max(0.0, stale_if_error_s)
        self._clock = clock
        self._wall_clock = wall_clock
        self._max_entries = max_entries
        # secret hash -> (when it was looked up, what it proved); oldest first, as every entry shares one ttl
        self._entries: OrderedDict[str, tuple[float, Principal | None]] = OrderedDict()

    async def authenticate(self, secret: str) -> Principal | None:
        key = hash_secret(secret)
        now = self._clock()
        self._drop_older_than(now - self._keep_s)
        entry = self._entries.get(key)
        if entry is not None and now - entry[0] < self._ttl_s:
            principal = entry[1]
        else:
            principal = await self._look_up(key, secret, entry)
        if principal is not None and principal.expired(self._wall_clock()):
            return None
        return principal

    def clear(self) -> None:
        """Forget everything, e.g. after this gateway revoked a token itself."""
        self._entries.clear()

    async def _look_up(
        self, key: str, secret: str, stale: tuple[float, Principal | None] | None
    ) -> Principal | None:
        try:
            principal = await self._store.authenticate(secret)
        except DependencyUnavailable as error:
            if stale is None:
                raise DependencyUnavailable(
                    "Authentication is unavailable: the token store cannot be reached, and this token was not "
                    "checked recently enough to be trusted without it. Try again shortly.",
                    retry_after_s=error.retry_after_s,
                ) from error
            return stale[1]  # kept in place: its age still counts from when the store last answered
        self._remember(key, self._clock(), principal)
        return principal

    def _remember(self, key: str, now: float, principal: Principal | None) -> None:
        if self._keep_s <= 0:
            return
        self._entries.pop(key, None)
        self._entries[key] = (now, principal)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)

    def _drop_older_than(self, oldest: float) -> None:
        while self._entries:
            stored_at = next(iter(self._entries.values()))[0]
            if stored_at > oldest:
                return
            self._entries.popitem(last=False)
