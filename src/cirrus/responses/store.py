"""Stored responses in the gateway's database (SQLite on one machine, PostgreSQL where several gateways share
it), per account, for `retention_s` (OpenAI keeps them 30 days).

A row keeps the response object as the API returned it (for `GET /v1/responses/{id}`) and the conversation it
ended, as chat messages: the turns of every response before it, this request's input and the answer, without
the instructions, which `previous_response_id` does not carry over. Another account's id reads as absent.
The request's input items, as `GET /v1/responses/{id}/input_items` lists them, are rows of their own.
"""

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cirrus.db.database import Database

Clock = Callable[[], float]

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS stored_responses (
        id TEXT PRIMARY KEY,
        account_id TEXT NOT NULL,
        body TEXT NOT NULL,
        conversation TEXT NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS stored_responses_expires_at ON stored_responses (expires_at)",
    """CREATE TABLE IF NOT EXISTS stored_response_items (
        response_id TEXT NOT NULL,
        position INTEGER NOT NULL,
        item TEXT NOT NULL,
        PRIMARY KEY (response_id, position)
    )""",
)


@dataclass(frozen=True)
class StoredResponse:
    id: str
    account_id: str
    body: dict[str, Any]
    conversation: list[dict[str, Any]]
    input_items: list[dict[str, Any]] = field(default_factory=list)


class StoredResponses:
    """Expiry is checked on read; `purge_expired` reclaims the space. The database belongs to whoever opened
    it, so nothing here closes it."""

    def __init__(self, db: Database, retention_s: float, clock: Clock = time.time) -> None:
        self._db = db
        self._retention_s = retention_s
        self._clock = clock

    @classmethod
    async def open(cls, db: Database, retention_s: float, clock: Clock = time.time) -> "StoredResponses":
        await db.migrate(SCHEMA)
        return cls(db, retention_s, clock)

    async def put(self, stored: StoredResponse) -> None:
        """The response, then its items (so a purge never takes them for an orphan's); a response whose items
        could not be written is taken back. Nobody reads it before this returns: the client learns its id after."""
        body, conversation = json.dumps(stored.body), json.dumps(stored.conversation)
        await self._db.execute(
            "INSERT INTO stored_responses (id, account_id, body, conversation, expires_at) VALUES (?, ?, ?, ?, ?)",
            (stored.id, stored.account_id, body, conversation, self._clock() + self._retention_s),
        )
        items = [(stored.id, position, json.dumps(item)) for position, item in enumerate(stored.input_items)]
        try:
            if items:
                await self._db.execute_many(
                    "INSERT INTO stored_response_items (response_id, position, item) VALUES (?, ?, ?)", items
                )
        except BaseException:
            await self.delete(stored.account_id, stored.id)
            raise

    async def input_items(self, response_id: str) -> list[dict[str, Any]]:
        """The items of a response already read with `get` (which checks its account and expiry)."""
        rows = await self._db.fetch_all(
            "SELECT item FROM stored_response_items WHERE response_id = ? ORDER BY position", (response_id,)
        )
        return [json.loads(row[0]) for row in rows]

    async def get(self, account_id: str, response_id: str) -> StoredResponse | None:
        row = await self._db.fetch_one(
            "SELECT body, conversation FROM stored_responses WHERE id = ? AND account_id = ? AND expires_at > ?",
            (response_id, account_id, self._clock()),
        )
        if row is None:
            return None
        return StoredResponse(response_id, account_id, json.loads(row[0]), json.loads(row[1]))

    async def delete(self, account_id: str, response_id: str) -> bool:
        deleted = await self._db.execute(
            "DELETE FROM stored_responses WHERE id = ? AND account_id = ? AND expires_at > ?",
            (response_id, account_id, self._clock()),
        )
        if deleted:
            await self._db.execute("DELETE FROM stored_response_items WHERE response_id = ?", (response_id,))
        return deleted > 0

    async def purge_expired(self) -> int:
        """Expired responses, and the items of any response no longer stored (one whose write failed halfway)."""
        purged = await self._db.execute(
            "DELETE FROM stored_responses WHERE expires_at <= ?", (self._clock(),)
        )
        await self._db.execute(
            "DELETE FROM stored_response_items WHERE response_id NOT IN (SELECT id FROM stored_responses)"
        )
        return purged
