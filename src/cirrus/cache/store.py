"""Where cached answers live: the embedded database on one machine, Redis where several gateways share them.

A store may raise on any failure (a lost connection, a corrupt row); `ResponseCache` catches, logs and serves
the request as a miss, so a store error never fails a request.
"""

from typing import Protocol

from cirrus.cache.answer import CachedAnswer


class ResponseStore(Protocol):
    async def get(self, key: str) -> CachedAnswer | None:
        """The answer under key, or None when there is none or it has expired."""
        ...

    async def put(self, key: str, account_id: str, answer: CachedAnswer, ttl_s: float) -> None: ...

    async def purge_expired(self) -> int:
        """Drop expired entries; return how many went (0 where the store expires them itself)."""
        ...

    async def close(self) -> None: ...
