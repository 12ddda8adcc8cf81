"""Who is using the console: the open principal on an open node, else the principal of a signed-in session.

A session resolves to the `Principal` its token gives a bearer caller, looked up in the identity store on every
request, so revoking or outliving the token signs its sessions out. The same session also authenticates the
real API routes for the playground, but only with its CSRF token in `X-Cirrus-CSRF` (see server/auth.py).
"""

import asyncio
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from cirrus.auth import OPEN_PRINCIPAL, Principal
from cirrus.auth.store import IdentityStore
from cirrus.console.session_store import ConsoleSession, SessionStore
from cirrus.db.database import Database
from cirrus.errors import Forbidden, NotReady


class Authenticator(Protocol):
    async def authenticate(self, secret: str) -> Principal | None: ...

    async def requires_token(self) -> bool: ...


class ConsoleSource(Protocol):
    """The gateway's parts the console needs; None while the gateway is not open."""

    def authenticator(self) -> Authenticator | None: ...

    def identity(self) -> IdentityStore | None: ...

    def database(self) -> Database | None: ...


@dataclass(frozen=True)
class ConsoleUser:
    """The principal a console request acts as, its session (None on an open node) and its CSRF token."""

    principal: Principal
    session: ConsoleSession | None
    csrf: str

    @property
    def open_node(self) -> bool:
        return self.session is None


class ConsoleAccess:
    def __init__(
        self, source: ConsoleSource, lifetime_s: float, clock: Callable[[], float] = time.time
    ) -> None:
        self._source = source
        self._lifetime_s = lifetime_s
        self._clock = clock
        self._store: SessionStore | None = None
        self._opening = asyncio.Lock()
        # An open node has no sessions; its console still refuses state changes a foreign page could forge.
        self.open_csrf = secrets.token_urlsafe(32)

    def now(self) -> float:
        return self._clock()

    async def is_open(self) -> bool:
        return not await self._authenticator().requires_token()

    async def user(self, session_id: str | None) -> ConsoleUser | None:
        """None: sign in first."""
        if await self.is_open():
            return ConsoleUser(OPEN_PRINCIPAL, None, self.open_csrf)
        if not session_id:
            return None
        session = await (await self.store()).get(session_id)
        if session is None:
            return None
        principal = await self._principal_of(session)
        return None if principal is None else ConsoleUser(principal, session, session.csrf)

    async def sign_in(self, secret: str) -> ConsoleSession | None:
        """None whatever the reason (unknown, revoked, expired token), so the answer reveals nothing."""
        principal = await self._authenticator().authenticate(secret)
        if principal is None or principal.token_id is None:
            return None
        return await (await self.store()).create(principal.token_id, principal.account_id)

    async def sign_out(self, session_id: str) -> None:
        await (await self.store()).delete(session_id)

    async def api_principal(self, session_id: str, csrf: str | None) -> Principal | None:
        """For an API route called with the session cookie and no Authorization header: None without a usable
        session (the caller gets 401), Forbidden when the session is good but the CSRF header is not."""
        user = await self.user(session_id)
        if user is None or user.session is None:
            return None
        if csrf is None or not csrf_matches(user.csrf, csrf):
            raise Forbidden("Authentication error: a console session needs its X-Cirrus-CSRF header")
        return user.principal

    async def store(self) -> SessionStore:
        """Opened (and migrated) at first use, once the gateway's database is open."""
        if self._store is None:
            async with self._opening:
                if self._store is None:
                    db = self._source.database()
                    if db is None:
                        raise NotReady("the gateway is not ready yet", retry_after_s=1)
                    self._store = await SessionStore.open(db, self._lifetime_s, self._clock)
        return self._store

    async def _principal_of(self, session: ConsoleSession) -> Principal | None:
        identity = self._source.identity()
        if identity is None:
            raise NotReady("the gateway is not ready yet", retry_after_s=1)
        token = await identity.get_token(session.token_id)
        if token is None or not token.usable(self._clock()):
            return None
        return token.principal()

    def _authenticator(self) -> Authenticator:
        authenticator = self._source.authenticator()
        if authenticator is None:  # the gateway's store is not open yet: fail closed, like the API routes
            raise NotReady("the gateway is not ready yet", retry_after_s=1)
        return authenticator


def csrf_matches(expected: str, given: str) -> bool:
    return hmac.compare_digest(expected.encode(), given.encode())
