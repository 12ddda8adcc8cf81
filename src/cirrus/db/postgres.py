"""PostgreSQL through psycopg 3: one autocommit connection, used by one coroutine at a time.

Placeholders are rewritten from `?` to `%s` outside quoted literals and identifiers; our SQL never uses
PostgreSQL's `?` JSON operators. Every `%` is doubled, because psycopg reads `%` as a placeholder marker
even inside literals once parameters are passed (and they always are).
"""

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from functools import lru_cache
from typing import TypeVar

import psycopg

from cirrus.db.database import Params, Row

T = TypeVar("T")

# One number for every Cirrus process, so two gateways starting at once migrate one after the other.
_MIGRATION_LOCK_KEY = 0x63697272
_TOKENS = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|\?|%")


def _rewrite_token(match: re.Match[str]) -> str:
    token = match.group(0)
    if token == "?":
        return "%s"
    return token.replace("%", "%%")


@lru_cache(maxsize=512)
def to_pyformat(sql: str) -> str:
    """`?` placeholders to psycopg's `%s`, and literal `%` escaped as `%%`."""
    return _TOKENS.sub(_rewrite_token, sql)


class PostgresDatabase:
    dialect = "postgresql"

    def __init__(self, dsn: str, connection: psycopg.AsyncConnection[Row]) -> None:
        self._dsn = dsn
        self._connection = connection
        self._lock = asyncio.Lock()

    @classmethod
    async def connect(cls, dsn: str) -> "PostgresDatabase":
        return cls(dsn, await cls._open(dsn))

    @staticmethod
    async def _open(dsn: str) -> psycopg.AsyncConnection[Row]:
        return await psycopg.AsyncConnection.connect(dsn, autocommit=True)

    async def _run(self, work: Callable[[psycopg.AsyncConnection[Row]], Awaitable[T]]) -> T:
        """Run `work` on the connection, reconnecting once if the server had closed it.

        A connection the server dropped (a restart, `pg_terminate_backend`, an idle timeout) is found out
        only when the next statement fails; that statement never reached a live backend, so it is retried.
        """
        async with self._lock:
            if self._connection.closed:
                self._connection = await self._open(self._dsn)
            try:
                return await work(self._connection)
            except psycopg.OperationalError:
                if not (self._connection.closed or self._connection.broken):
                    raise
            await self._connection.close()
            self._connection = await self._open(self._dsn)
            return await work(self._connection)

    async def execute(self, sql: str, params: Params = ()) -> int:
        async def work(connection: psycopg.AsyncConnection[Row]) -> int:
            cursor = await connection.execute(to_pyformat(sql), tuple(params))
            return cursor.rowcount

        return await self._run(work)

    async def execute_many(self, sql: str, rows: Sequence[Params]) -> None:
        async def work(connection: psycopg.AsyncConnection[Row]) -> None:
            async with connection.transaction(), connection.cursor() as cursor:
                await cursor.executemany(to_pyformat(sql), [tuple(row) for row in rows])

        await self._run(work)

    async def fetch_all(self, sql: str, params: Params = ()) -> list[Row]:
        async def work(connection: psycopg.AsyncConnection[Row]) -> list[Row]:
            cursor = await connection.execute(to_pyformat(sql), tuple(params))
            return [tuple(row) for row in await cursor.fetchall()]

        return await self._run(work)

    async def fetch_one(self, sql: str, params: Params = ()) -> Row | None:
        async def work(connection: psycopg.AsyncConnection[Row]) -> Row | None:
            cursor = await connection.execute(to_pyformat(sql), tuple(params))
            row = await cursor.fetchone()
            return None if row is None else tuple(row)

        return await self._run(work)

    async def migrate(self, statements: Sequence[str]) -> None:
        async def work(connection: psycopg.AsyncConnection[Row]) -> None:
            # Concurrent `CREATE TABLE IF NOT EXISTS` can still collide in the catalog: serialise them.
            async with connection.transaction():
                await connection.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK_KEY,))
                for statement in statements:
                    await connection.execute(to_pyformat(statement), ())

        await self._run(work)

    async def close(self) -> None:
        async with self._lock:
            await self._connection.close()
