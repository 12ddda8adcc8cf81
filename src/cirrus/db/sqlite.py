"""SQLite in WAL mode: writes on one connection driven by one thread, so the event loop never waits on a write,
and reads (`fetch_all`, `fetch_one`) on a few reader connections of their own, which refuse writes.

WAL lets readers run beside the writer, each statement on the last committed state (every statement commits on
its own: no transaction spans calls). With one connection for everything, one slow read (an AI Search keyword
query over 100k chunks takes 10-30 ms) queued every other statement behind it: a hybrid search's vector side
waited for its own keyword side, and usage records, key lookups and logs waited for both.

A file held locked by another process past the busy timeout answers like an unavailable server
(`DependencyUnavailable`, 503 / 3057); every other error is the statement's.
"""

import asyncio
import queue
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
READERS = 2  # reader connections (and threads): SQLite releases the GIL while a statement runs


def _busy(error: sqlite3.OperationalError) -> bool:
    """Locked past the busy timeout, by its result code (extended codes keep the primary one in the low byte)."""
    code = getattr(error, "sqlite_errorcode", None)
    return code is not None and (code & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


class SqliteDatabase:
    dialect = "sqlite"

    def __init__(self, connection: sqlite3.Connection, readers: Sequence[sqlite3.Connection] = ()) -> None:
        """`readers` answer the reads (none: the writer answers everything, as an in-memory database must)."""
        self._connection = connection
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cirrus-sqlite")
        self._readers: queue.SimpleQueue[sqlite3.Connection | None] = queue.SimpleQueue()  # None: closed
        for reader in readers:
            self._readers.put(reader)
        self._reader_count = len(readers)
        self._closed = False
        self._reading = ThreadPoolExecutor(
            max_workers=max(1, len(readers)), thread_name_prefix="cirrus-sqlite-read"
        )

    @classmethod
    def open(
        cls, path: str, busy_timeout_s: float = BUSY_TIMEOUT_S, readers: int = READERS
    ) -> "SqliteDatabase":
        if path == ":memory:":
            return cls(_connect(path, busy_timeout_s))
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        writer = _connect(path, busy_timeout_s)
        writer.execute("PRAGMA journal_mode=WAL")
        writer.execute("PRAGMA synchronous=NORMAL")
        reading = [_connect(path, busy_timeout_s) for _ in range(readers)]
        for reader in reading:
            reader.execute("PRAGMA query_only=ON")
        return cls(writer, reading)

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        return await self._answer(self._thread, lambda: work(self._connection))

    async def _read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        if not self._reader_count:
            return await self._run(work)

        def on_a_reader() -> T:
            reader = self._readers.get()
            if (
                reader is None
            ):  # closed: wake the next read waiting too, then refuse, as a closed connection does
                self._readers.put(None)
                raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
            try:
                return work(reader)
            finally:
                self._readers.put(reader)

        return await self._answer(self._reading, on_a_reader)

    async def _answer(self, executor: ThreadPoolExecutor, work: Callable[[], T]) -> T:
        if self._closed:
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
        try:
            return await asyncio.get_running_loop().run_in_executor(executor, work)
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
        return await self._read(lambda c: [tuple(r) for r in c.execute(sql, tuple(params)).fetchall()])

    async def fetch_one(self, sql: str, params: Params = ()) -> Row | None:
        def work(connection: sqlite3.Connection) -> Row | None:
            row = connection.execute(sql, tuple(params)).fetchone()
            return None if row is None else tuple(row)

        return await self._read(work)

    async def migrate(self, statements: Sequence[str]) -> None:
        def work(connection: sqlite3.Connection) -> None:
            for statement in statements:
                connection.execute(statement)

        await self._run(work)

    async def close(self) -> None:
        def close_readers() -> None:  # each as it is given back: a read still running finishes first
            for _ in range(self._reader_count):
                reader = self._readers.get()
                if reader is None:  # closed already
                    break
                reader.close()
            self._readers.put(None)  # a read that comes later finds the database closed, not an empty queue

        await asyncio.get_running_loop().run_in_executor(self._reading, close_readers)
        await self._run(lambda c: c.close())
        self._closed = True
        self._reading.shutdown(wait=False)
        self._thread.shutdown(wait=False)


def _connect(path: str, busy_timeout_s: float) -> sqlite3.Connection:
    connection = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=busy_timeout_s)
    connection.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
    return connection
