"""PostgreSQL through psycopg 3: a pool of autocommit connections, every call bounded by db/guard.py.

Placeholders are rewritten from `?` to `%s` outside quoted literals and identifiers; our SQL never uses
PostgreSQL's `?` JSON operators. Every `%` is doubled, because psycopg reads `%` as a placeholder marker
even inside literals once parameters are passed (and they always are).

Limits: the guard bounds the whole call on the client side, since a frozen server answers nothing, not even a
cancel; reaching that deadline counts as an outage and opens the breaker. So a live server must answer within it
even when it is busy: a call waits for a pooled connection at most `POOL_WAIT_SHARE` of its deadline, and the
server cancels a statement past `STATEMENT_SHARE` of it, which leaves the rest as margin for the answer to arrive.
Those answers (db/postgres_errors.py) are 503 for their caller alone. A call that found its connection dropped (a
restart, an idle timeout) is retried once on a fresh one, and the rest of the pool, opened to the same server, is
replaced.
"""

import math
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import lru_cache, partial
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from cirrus.db.database import Params, Row
from cirrus.db.guard import DatabaseGuard, DatabaseLimits
from cirrus.db.postgres_errors import PoolBusy, classify
from cirrus.errors import DependencyUnavailable
from cirrus.resilience import CircuitBreaker

T = TypeVar("T")
Connection = psycopg.AsyncConnection[Row]
Pool = AsyncConnectionPool[Connection]
MIGRATION_TIMEOUT_S = 60.0
RECONNECT_TIMEOUT_S = 5.0  # the pool stops re-adding a lost connection after this; the next call asks again
DRAIN_INTERVAL_S = 1.0
CLOSE_TIMEOUT_S = 5.0
# Shares of a call's deadline: waiting for a free connection, then one statement. Both end, with the server's
# or the pool's own error, well before the deadline, which only a silent server then reaches.
POOL_WAIT_SHARE = 0.3
STATEMENT_SHARE = 0.5

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


class ConnectionDropped(psycopg.OperationalError):
    """The server had closed the connection a call was given (a restart, an idle timeout): the call most likely
    never reached a live backend, so it is tried once more on a fresh connection."""


class PostgresDatabase:
    dialect = "postgresql"

    def __init__(self, pool: Pool, limits: DatabaseLimits) -> None:
        self._pool = pool
        self._guard = DatabaseGuard(limits, classify)
        self._limits = limits
        self._drained_at = -DRAIN_INTERVAL_S
        self._in_use = 0  # connections held by calls, abandoned ones still running included

    @property
    def breaker(self) -> CircuitBreaker:
        return self._guard.breaker

    @classmethod
    async def connect(cls, dsn: str, limits: DatabaseLimits | None = None) -> "PostgresDatabase":
        """Connect once first, so a wrong address or password fails here with the server's own reason."""
        limits = limits or DatabaseLimits()
        options = _connection_options(limits)
        try:
            first = await psycopg.AsyncConnection.connect(dsn, **options)
        except psycopg.OperationalError as error:
            raise DependencyUnavailable(
                f"could not connect to the database ({type(error).__name__})",
                retry_after_s=limits.retry_after_s,
            ) from error
        await first.close()
        pool: Pool = AsyncConnectionPool(
            dsn,
            kwargs=options,
            configure=partial(_configure, limits),
            min_size=1,
            max_size=limits.pool_size,
            timeout=limits.timeout_s * POOL_WAIT_SHARE,
            reconnect_timeout=RECONNECT_TIMEOUT_S,
            name="cirrus",
            open=False,
        )
        await pool.open()
        return cls(pool, limits)

    async def _run(self, work: Callable[[Connection], Awaitable[T]], timeout_s: float | None = None) -> T:
        wait_s = (self._limits.timeout_s if timeout_s is None else timeout_s) * POOL_WAIT_SHARE
        return await self._guard.run(lambda: self._on_connection(work, wait_s), timeout_s)

    async def _on_connection(self, work: Callable[[Connection], Awaitable[T]], wait_s: float) -> T:
        try:
            return await self._attempt(work, wait_s)
        except ConnectionDropped:
            await self._replace_idle_connections()
        return await self._attempt(work, wait_s)

    async def _attempt(self, work: Callable[[Connection], Awaitable[T]], wait_s: float) -> T:
        try:
            async with self._pool.connection(wait_s) as connection:
                return await self._holding(connection, work)
        except PoolTimeout as error:  # only the wait for a connection raises it
            if (
                self._in_use > 0
            ):  # calls are being served: the pool is full, or still growing towards its size
                raise PoolBusy(f"no connection was free within {wait_s:g}s") from error
            raise  # not one connection could be had: the server is unreachable

    async def _holding(self, connection: Connection, work: Callable[[Connection], Awaitable[T]]) -> T:
        self._in_use += 1
        try:
            return await work(connection)
        except psycopg.OperationalError as error:
            if connection.closed:  # broken, or closed by the server
                raise ConnectionDropped(
                    f"the database closed the connection ({type(error).__name__})"
                ) from error
            raise
        finally:
            self._in_use -= 1

    async def _replace_idle_connections(self) -> None:
        """A dropped connection usually means the server restarted, which dropped its idle siblings too."""
        now = time.monotonic()
        if now - self._drained_at >= DRAIN_INTERVAL_S:
            self._drained_at = now
            await self._pool.drain()

    async def execute(self, sql: str, params: Params = ()) -> int:
        async def work(connection: Connection) -> int:
            cursor = await connection.execute(to_pyformat(sql), tuple(params))
            return cursor.rowcount

        return await self._run(work)

    async def execute_many(self, sql: str, rows: Sequence[Params]) -> None:
        async def work(connection: Connection) -> None:
            async with connection.transaction(), connection.cursor() as cursor:
                await cursor.executemany(to_pyformat(sql), [tuple(row) for row in rows])

        await self._run(work)

    async def fetch_all(self, sql: str, params: Params = ()) -> list[Row]:
        async def work(connection: Connection) -> list[Row]:
            cursor = await connection.execute(to_pyformat(sql), tuple(params))
            return [tuple(row) for row in await cursor.fetchall()]

        return await self._run(work)

    async def fetch_one(self, sql: str, params: Params = ()) -> Row | None:
        async def work(connection: Connection) -> Row | None:
            cursor = await connection.execute(to_pyformat(sql), tuple(params))
            row = await cursor.fetchone()
            return None if row is None else tuple(row)

        return await self._run(work)

    async def migrate(self, statements: Sequence[str]) -> None:
        """Given longer than a request's call: it may wait for another gateway's migration to finish."""

        async def work(connection: Connection) -> None:
            # Concurrent `CREATE TABLE IF NOT EXISTS` can still collide in the catalog: serialise them.
            async with connection.transaction():
                await connection.execute(
                    "SELECT set_config('statement_timeout', %s, true)",
                    (_statement_timeout(MIGRATION_TIMEOUT_S),),
                )
                await connection.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK_KEY,))
                for statement in statements:
                    await connection.execute(to_pyformat(statement), ())

        await self._run(work, MIGRATION_TIMEOUT_S)

    async def close(self) -> None:
        await self._pool.close(timeout=CLOSE_TIMEOUT_S)


def _connection_options(limits: DatabaseLimits) -> dict[str, Any]:
    # libpq counts whole seconds and treats anything below 2 as 2.
    return {"autocommit": True, "connect_timeout": max(2, math.ceil(limits.timeout_s))}


async def _configure(limits: DatabaseLimits, connection: Connection) -> None:
    """The server gives up on a slow statement and says so before the gateway's deadline, which would take its
    silence for an outage; and it does not run a statement for nobody."""
    await connection.execute(
        "SELECT set_config('statement_timeout', %s, false)", (_statement_timeout(limits.timeout_s),)
    )


def _statement_timeout(deadline_s: float) -> str:
    """`statement_timeout` in milliseconds for calls bounded by `deadline_s`."""
    return str(max(1, round(deadline_s * STATEMENT_SHARE * 1000)))
