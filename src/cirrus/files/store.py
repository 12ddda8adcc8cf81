"""Files in the gateway's database (SQLite on one machine, PostgreSQL where several gateways share it), per
account: another account's id reads as absent.

An upload keeps its content in its row. A made file (a batch's output or error file) keeps none: its content is
made from elsewhere whenever it is read. It is written `pending` beside what will make it, invisible until that
is finished and `settle` records its size and time (or `drop_pending` removes it, when it would be empty). A made
file that its account deletes stays `deleted`, invisible, so its time is still known to what it came from.
Every file expires at `expires_at`; `purge_expired` reclaims the space.
"""

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from cirrus.db.database import Database, Row

Clock = Callable[[], float]
Order = Literal["asc", "desc"]
Files = list["StoredFile"]
Names = list[str]

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS files (
        id TEXT PRIMARY KEY,
        account_id TEXT NOT NULL,
        purpose TEXT NOT NULL,
        filename TEXT NOT NULL,
        bytes BIGINT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL,
        state TEXT NOT NULL,
        source TEXT,
        content TEXT
    )""",
    "CREATE INDEX IF NOT EXISTS files_account ON files (account_id, created_at, id)",
    "CREATE INDEX IF NOT EXISTS files_expires_at ON files (expires_at)",
    "CREATE INDEX IF NOT EXISTS files_source ON files (source)",
)
_COLUMNS = "id, account_id, purpose, filename, bytes, created_at, expires_at, state, source"
_INSERT = f"INSERT INTO files ({_COLUMNS}, content) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"


class FileState(StrEnum):
    PENDING = "pending"
    PROCESSED = "processed"
    DELETED = "deleted"


@dataclass(frozen=True)
class StoredFile:
    """`source` names what makes a made file's content (a batch id); None for an upload."""

    id: str
    account_id: str
    purpose: str
    filename: str
    bytes: int
    created_at: float
    expires_at: float
    state: FileState
    source: str | None = None


@dataclass(frozen=True)
class MadeFile:
    id: str
    purpose: str
    filename: str


class FileStore:
    """The database belongs to whoever opened it, so nothing here closes it."""

    def __init__(self, db: Database, clock: Clock = time.time) -> None:
        self._db = db
        self._clock = clock

    @classmethod
    async def open(cls, db: Database, clock: Clock = time.time) -> "FileStore":
        await db.migrate(SCHEMA)
        return cls(db, clock)

    async def upload(
        self, account_id: str, purpose: str, filename: str, content: str, retention_s: float
    ) -> StoredFile:
        now = self._clock()
        stored = StoredFile(
            f"file-{uuid.uuid4().hex}",
            account_id,
            purpose,
            filename,
            len(content.encode()),
            now,
            now + retention_s,
            FileState.PROCESSED,
        )
        await self._insert(stored, content)
        return stored

    async def add_pending(
        self, account_id: str, source: str, files: Sequence[MadeFile], expires_at: float
    ) -> None:
        """Made files of `source`, invisible until settled."""
        now = self._clock()
        pending = [
            StoredFile(
                made.id,
                account_id,
                made.purpose,
                made.filename,
                0,
                now,
                expires_at,
                FileState.PENDING,
                source,
            )
            for made in files
        ]
        await self._db.execute_many(_INSERT, [(*_values(made), None) for made in pending])

    async def get(self, account_id: str, file_id: str) -> StoredFile | None:
        """A processed file of the account that has not expired."""
        row = await self._db.fetch_one(
            f"SELECT {_COLUMNS} FROM files WHERE id = ? AND account_id = ? AND state = ? AND expires_at > ?",
            (file_id, account_id, FileState.PROCESSED.value, self._clock()),
        )
        return None if row is None else _file(row)

    async def content(self, stored: StoredFile) -> str | None:
        """An upload's content (None for a made file, or one deleted meanwhile)."""
        row = await self._db.fetch_one("SELECT content FROM files WHERE id = ?", (stored.id,))
        return None if row is None or row[0] is None else str(row[0])

    async def list(
        self,
        account_id: str,
        limit: int,
        order: Order = "desc",
        after: str | None = None,
        purpose: str | None = None,
    ) -> Files:
        """By creation time; `after` is the id of the last file of the previous page (an unknown one ends the
        list)."""
        where = "account_id = ? AND state = ? AND expires_at > ?"
        params: list[Any] = [account_id, FileState.PROCESSED.value, self._clock()]
        if purpose is not None:
            where += " AND purpose = ?"
            params.append(purpose)
        if after is not None:
            relation = "<" if order == "desc" else ">"
            where += f" AND (created_at, id) {relation} (SELECT created_at, id FROM files WHERE id = ? AND account_id = ?)"
            params += [after, account_id]
        direction = "DESC" if order == "desc" else "ASC"
        rows = await self._db.fetch_all(
            f"SELECT {_COLUMNS} FROM files WHERE {where} ORDER BY created_at {direction}, id {direction} LIMIT ?",
            (*params, limit),
        )
        return [_file(row) for row in rows]

    async def delete(self, account_id: str, file_id: str) -> bool:
        """An upload goes; a made file stays, deleted (see the module's note)."""
        now = self._clock()
        visible = "id = ? AND account_id = ? AND state = ? AND expires_at > ?"
        params = (file_id, account_id, FileState.PROCESSED.value, now)
        deleted = await self._db.execute(f"DELETE FROM files WHERE {visible} AND source IS NULL", params)
        if not deleted:
            deleted = await self._db.execute(
                f"UPDATE files SET state = ? WHERE {visible} AND source IS NOT NULL",
                (FileState.DELETED.value, *params),
            )
        return deleted > 0

    async def made_files(self, source: str) -> Files:
        """Every made file of `source`, whatever its state, unless expired."""
        rows = await self._db.fetch_all(
            f"SELECT {_COLUMNS} FROM files WHERE source = ? AND expires_at > ? ORDER BY id",
            (source, self._clock()),
        )
        return [_file(row) for row in rows]

    async def pending_sources(self, account_id: str) -> Names:
        rows = await self._db.fetch_all(
            "SELECT DISTINCT source FROM files WHERE account_id = ? AND state = ? AND source IS NOT NULL",
            (account_id, FileState.PENDING.value),
        )
        return sorted(str(row[0]) for row in rows)

    async def settle(self, file_id: str, size: int, created_at: float) -> None:
        """A pending made file becomes visible with its size and time; settling it twice (two gateways reading
        the same finished batch) writes the same values once."""
        await self._db.execute(
            "UPDATE files SET state = ?, bytes = ?, created_at = ? WHERE id = ? AND state = ?",
            (FileState.PROCESSED.value, size, created_at, file_id, FileState.PENDING.value),
        )

    async def drop_pending(self, file_id: str) -> None:
        await self._db.execute(
            "DELETE FROM files WHERE id = ? AND state = ?", (file_id, FileState.PENDING.value)
        )

    async def purge_expired(self) -> int:
        return await self._db.execute("DELETE FROM files WHERE expires_at <= ?", (self._clock(),))

    async def _insert(self, stored: StoredFile, content: str | None) -> None:
        await self._db.execute(_INSERT, (*_values(stored), content))


def _values(stored: StoredFile) -> tuple[Any, ...]:
    """In `_COLUMNS`' order."""
    return (
        stored.id,
        stored.account_id,
        stored.purpose,
        stored.filename,
        stored.bytes,
        stored.created_at,
        stored.expires_at,
        stored.state.value,
        stored.source,
    )


def _file(row: Row) -> StoredFile:
    return StoredFile(
        str(row[0]),
        str(row[1]),
        str(row[2]),
        str(row[3]),
        int(row[4]),
        float(row[5]),
        float(row[6]),
        FileState(row[7]),
        None if row[8] is None else str(row[8]),
    )
