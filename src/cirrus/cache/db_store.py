"""The response cache in the gateway's database (SQLite on one machine, PostgreSQL where several share it)."""

import time
from collections.abc import Callable

from cirrus.cache.answer import CachedAnswer
from cirrus.db.database import Database

Clock = Callable[[], float]

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS response_cache (
        key TEXT PRIMARY KEY,
        account_id TEXT NOT NULL,
        model TEXT NOT NULL,
        answer TEXT NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS response_cache_expires_at ON response_cache (expires_at)",
)

_UPSERT = """INSERT INTO response_cache (key, account_id, model, answer, expires_at) VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (key) DO UPDATE SET account_id = excluded.account_id, model = excluded.model,
    answer = excluded.answer, expires_at = excluded.expires_at"""


class DatabaseResponseStore:
    """Expiry is checked on read; `purge_expired` reclaims the space. The database belongs to whoever opened
    it, so `close` leaves it open."""

    def __init__(self, db: Database, clock: Clock = time.time) -> None:
        self._db = db
        self._clock = clock

    @classmethod
    async def open(cls, db: Database, clock: Clock = time.time) -> "DatabaseResponseStore":
        await db.migrate(SCHEMA)
        return cls(db, clock)

    async def get(self, key: str) -> CachedAnswer | None:
        row = await self._db.fetch_one(
            "SELECT answer FROM response_cache WHERE key = ? AND expires_at > ?", (key, self._clock())
        )
        return None if row is None else CachedAnswer.from_json(row[0])

    async def put(self, key: str, account_id: str, answer: CachedAnswer, ttl_s: float) -> None:
        expires_at = self._clock() + ttl_s
        await self._db.execute(_UPSERT, (key, account_id, answer.model, answer.to_json(), expires_at))

    async def purge_expired(self) -> int:
        return await self._db.execute("DELETE FROM response_cache WHERE expires_at <= ?", (self._clock(),))

    async def close(self) -> None:
        return None
