"""Stored usage totals, cached so a budget check on the hot path usually costs a dictionary lookup.

A cached total is read again when it is older than the TTL, or at once when this process has written more to
that key since (the meter's ledger version moved). So this process's own usage is never missed; usage that
other gateway processes write is seen up to TTL + their flush interval late.

While the store is unavailable (it raises `DependencyUnavailable`), the last total seen stands in, however old,
and 0 for a total never read: a budget then counts what this gateway saw, metered and holds, rather than fail
every request for an outage of the usage store.
"""

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from cirrus.errors import DependencyUnavailable

log = logging.getLogger(__name__)

Key = tuple[str, str, str]  # (what, subject, period)
MAX_ENTRIES = 50_000


@dataclass(frozen=True)
class _Entry:
    value: float
    read_at: float
    version: int


class CachedTotals:
    def __init__(self, ttl_s: float, clock: Callable[[], float]) -> None:
        self._ttl_s = ttl_s
        self._clock = clock
        self._entries: dict[Key, _Entry] = {}
        self._failing = False

    async def get(self, key: Key, version: int, read: Callable[[], Awaitable[float]]) -> float:
        """`version` must be taken before the read, so a write that lands during it makes the next get reread."""
        now = self._clock()
        entry = self._entries.get(key)
        if entry is not None and entry.version == version and now - entry.read_at < self._ttl_s:
            return entry.value
        try:
            value = await read()
        except DependencyUnavailable as error:
            self._failed(error)
            return entry.value if entry is not None else 0.0
        if self._failing:
            self._failing = False
            log.warning("usage totals readable again: budgets count the stored totals")
        if len(self._entries) >= MAX_ENTRIES:
            self._evict(now)
        self._entries[key] = _Entry(value, now, version)
        return value

    def _failed(self, error: DependencyUnavailable) -> None:
        if not self._failing:
            self._failing = True
            log.warning("usage totals unreadable (%s): budgets count the last totals seen", error.message)

    def _evict(self, now: float) -> None:
        self._entries = {k: e for k, e in self._entries.items() if now - e.read_at < self._ttl_s}
