"""SQLite in WAL mode, one connection driven by one thread so the event loop never waits on a write.

A file held locked by another process past the busy timeout answers like an unavailable server
(`DependencyUnavailable`, 503 / 3057); every other error is the statement's.
"""

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from cirrus.db.database import Params, Row
from cirrus.errors import DependencyUnavailable

T = TypeVar("T")
BUSY_TIMEOUT_S = 10.0
BUSY_RETRY_AFTER_S = 1.0


def _busy(error: sqlite3.OperationalError) -> bool:
    """Locked past the busy timeout, by its result code (extended codes keep the primary one in the low byte)."""
    code = getattr(error, "sqlite_errorcode", None)
    return code is not None and (code & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


class SqliteDatabase:
    dialect = "sqlite"

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cirrus-sqlite")

    @classmethod
    def open(cls, path: str, busy_timeout_s: float = BUSY_TIMEOUT_S) -> "SqliteDatabase":
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(
            path, check_same_thread=False, isolation_level=None, timeout=busy_timeout_s
        )
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        return cls(connection)

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        try:
            return await asyncio.get_running_loop().run_in_executor(self._thread, work, self._connection)
        except sqlite3.OperationalError as error:
            if _busy(error):
                raise DependencyUnavailable(
                    "The database is busy (another process holds its write lock); try again shortly.",
                    retry_after_s=BUSY_RETRY_AFTER_S,
                ) from error
            raise

    async def execute(self, sql: str, params: Params = ()) -> int:
        return await self._run(lambda c: c.execute(sql, tuple(params)).rowcount)

    async def execute_many(self, sql: str, rows: Sequence[Params]) -> None:
        def work(connection: sqlite3.Connection) -> None:
            with connection:  # one transaction for the batch
                connection.execute("BEGIN")
                connection.executemany(sql, [tuple(row) for row in rows])

        await self._run(work)

    async def fetch_all(self, sql: str, params: Params = ()) -> list[Row]:
        return await self._run(lambda c: [tuple(r) for r in c.execute(sql, tuple(params)).fetchall()])

    async def fetch_one(self, sql: str, params: Params = ()) -> Row | None:
        def work(connection: sqlite3.Connection) -> Row | None:
            row = connection.execute(sql, tuple(params)).fetchone()
            return None if row is None else tuple(row)

        return await self._run(work)

    async def migrate(self, statements: Sequence[str]) -> None:
        def work(connection: sqlite3.Connection) -> None:
            for statement in statements:
                connection.execute(statement)

        await self._run(work)

    async def close(self) -> None:
        await self._run(lambda c: c.close())
        self._thread.shutdown(wait=False)
