"""Console sessions in the gateway's database (SQLite or PostgreSQL), one row per signed-in browser.

A row keeps the token's id, never its secret, so the principal is resolved through the identity store on each
request and a revoked or expired token ends its sessions at once. The session id is the cookie's secret: only its
SHA-256 is stored, like a token's, so a copy of the database signs nobody in.
"""

import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from cirrus.db.database import Database

Clock = Callable[[], float]

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS console_sessions (
        id_sha256 TEXT PRIMARY KEY,
        token_id TEXT NOT NULL,
        account_id TEXT NOT NULL,
        csrf TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS console_sessions_expires_at ON console_sessions (expires_at)",
)


@dataclass(frozen=True)
class ConsoleSession:
    id: str
    token_id: str
    account_id: str
    csrf: str
    expires_at: float


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


class SessionStore:
    """Expiry is checked on read; each sign-in also removes the sessions that have expired."""

    def __init__(self, db: Database, lifetime_s: float, clock: Clock = time.time) -> None:
        self._db = db
        self._lifetime_s = lifetime_s
        self._clock = clock

    @classmethod
    async def open(cls, db: Database, lifetime_s: float, clock: Clock = time.time) -> "SessionStore":
        await db.migrate(SCHEMA)
        return cls(db, lifetime_s, clock)

    async def create(self, token_id: str, account_id: str) -> ConsoleSession:
        await self.purge_expired()
        now = self._clock()
        session = ConsoleSession(
            id=secrets.token_urlsafe(32),
            token_id=token_id,
            account_id=account_id,
            csrf=secrets.token_urlsafe(32),
            expires_at=now + self._lifetime_s,
        )
        await self._db.execute(
            "INSERT INTO console_sessions (id_sha256, token_id, account_id, csrf, created_at, expires_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (_digest(session.id), token_id, account_id, session.csrf, now, session.expires_at),
        )
        return session

    async def get(self, session_id: str) -> ConsoleSession | None:
        row = await self._db.fetch_one(
            "SELECT token_id, account_id, csrf, expires_at FROM console_sessions "
            "WHERE id_sha256 = ? AND expires_at > ?",
            (_digest(session_id), self._clock()),
        )
        if row is None:
            return None
        token_id, account_id, csrf, expires_at = row
        return ConsoleSession(session_id, token_id, account_id, csrf, expires_at)

    async def delete(self, session_id: str) -> bool:
        deleted = await self._db.execute(
            "DELETE FROM console_sessions WHERE id_sha256 = ?", (_digest(session_id),)
        )
        return deleted > 0

    async def purge_expired(self) -> int:
        return await self._db.execute("DELETE FROM console_sessions WHERE expires_at <= ?", (self._clock(),))
