"""SQLite in WAL mode, one connection driven by one thread so the event loop never waits on a write."""

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from cirrus.db.database import Params, Row

T = TypeVar("T")


class SqliteDatabase:
    dialect = "sqlite"

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cirrus-sqlite")

    @classmethod
    def open(cls, path: str) -> "SqliteDatabase":
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=10.0)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute("PRAGMA busy_timeout=10000")
        return cls(connection)

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, work, self._connection)

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
