"""The Database interface behaves alike on SQLite and PostgreSQL; an unavailable database is a 503, never an
error of the statement (stopped, frozen and restarted servers: tests/faults/test_database.py)."""

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg_pool import PoolTimeout

from cirrus.db import open_database
from cirrus.db.database import Database
from cirrus.db.guard import DatabaseLimits, Verdict
from cirrus.db.postgres import ConnectionDropped, PostgresDatabase, to_pyformat
from cirrus.db.postgres_errors import PoolBusy, classify
from cirrus.db.sqlite import SqliteDatabase
from cirrus.errors import DependencyUnavailable
from cirrus.resilience import BreakerState
from tests.services.postgres import create_database, drop_database
from tests.services.processes import free_port

ITEMS = (
    "CREATE TABLE IF NOT EXISTS items ("
    " id TEXT PRIMARY KEY, count BIGINT NOT NULL, price DOUBLE PRECISION, note TEXT)"
)


async def _items(db: Database) -> list[tuple[object, ...]]:
    return await db.fetch_all("SELECT id, count, price, note FROM items ORDER BY id")


async def test_migrate_is_idempotent(database: Database) -> None:
    await database.migrate([ITEMS])
    await database.migrate([ITEMS, "CREATE INDEX IF NOT EXISTS items_count ON items (count)"])
    assert await _items(database) == []


async def test_insert_and_fetch(database: Database) -> None:
    await database.migrate([ITEMS])
    await database.execute(
        "INSERT INTO items (id, count, price, note) VALUES (?, ?, ?, ?)", ("a", 1, 2.5, "x")
    )
    await database.execute("INSERT INTO items (id, count) VALUES (?, ?)", ("b", 2))
    assert await database.fetch_one("SELECT count, note FROM items WHERE id = ?", ("a",)) == (1, "x")
    assert await database.fetch_one("SELECT count FROM items WHERE id = ?", ("nobody",)) is None
    assert await _items(database) == [("a", 1, 2.5, "x"), ("b", 2, None, None)]


async def test_execute_returns_rowcount(database: Database) -> None:
    await database.migrate([ITEMS])
    await database.execute_many("INSERT INTO items (id, count) VALUES (?, ?)", [("a", 1), ("b", 1), ("c", 2)])
    assert await database.execute("UPDATE items SET count = count + 1 WHERE count = ?", (1,)) == 2
    assert await database.execute("DELETE FROM items WHERE id = ?", ("zzz",)) == 0
    assert await database.execute("DELETE FROM items") == 3


async def test_upsert(database: Database) -> None:
    await database.migrate([ITEMS])
    upsert = (
        "INSERT INTO items (id, count, note) VALUES (?, ?, ?) "
        "ON CONFLICT (id) DO UPDATE SET count = items.count + excluded.count, note = excluded.note"
    )
    await database.execute(upsert, ("a", 1, "first"))
    await database.execute(upsert, ("a", 5, "second"))
    await database.execute(upsert, ("b", 7, None))
    assert await database.fetch_all("SELECT id, count, note FROM items ORDER BY id") == [
        ("a", 6, "second"),
        ("b", 7, None),
    ]


async def test_execute_many_is_one_transaction(database: Database) -> None:
    await database.migrate([ITEMS])
    await database.execute_many("INSERT INTO items (id, count) VALUES (?, ?)", [])
    with pytest.raises(Exception, match=r"(?i)unique|duplicate"):
        await database.execute_many("INSERT INTO items (id, count) VALUES (?, ?)", [("a", 1), ("a", 2)])
    assert await _items(database) == []
    await database.execute("INSERT INTO items (id, count) VALUES (?, ?)", ("b", 1))  # still usable
    assert len(await _items(database)) == 1


async def test_types_round_trip(database: Database) -> None:
    await database.migrate([ITEMS])
    rows = [
        ("big", 2**53 + 1, 0.1, "naïve ✓ 'quoted' 100% sure?"),
        ("negative", -(2**62), -1e300, ""),
        ("nulls", 0, None, None),
    ]
    await database.execute_many("INSERT INTO items (id, count, price, note) VALUES (?, ?, ?, ?)", rows)
    fetched = await _items(database)
    assert fetched == sorted(rows)
    assert [type(value) for value in fetched[0]] == [str, int, float, str]


async def test_literals_keep_question_marks_and_percents(database: Database) -> None:
    await database.migrate([ITEMS])
    await database.execute("INSERT INTO items (id, count, note) VALUES (?, ?, '50% off?')", ("a", 1))
    row = await database.fetch_one("SELECT note FROM items WHERE note LIKE '%off?' AND id = ?", ("a",))
    assert row == ("50% off?",)


async def test_concurrent_statements_share_the_connection(database: Database) -> None:
    await database.migrate([ITEMS])
    insert = "INSERT INTO items (id, count) VALUES (?, ?)"
    await asyncio.gather(*(database.execute(insert, (f"i{n:02}", n)) for n in range(20)))
    counts = await asyncio.gather(
        *(database.fetch_one("SELECT count FROM items WHERE id = ?", (f"i{n:02}",)) for n in range(20))
    )
    assert counts == [(n,) for n in range(20)]


def test_placeholders_are_rewritten_outside_literals() -> None:
    assert to_pyformat("SELECT ? WHERE a = ?") == "SELECT %s WHERE a = %s"
    assert to_pyformat("SELECT '?', \"odd?\" , ?") == "SELECT '?', \"odd?\" , %s"
    assert to_pyformat("SELECT 'it''s ?', ? LIKE 'a%'") == "SELECT 'it''s ?', %s LIKE 'a%%'"


async def test_reconnects_after_the_server_closed_the_connection(postgres_dsn: str) -> None:
    url = create_database(postgres_dsn)
    db = await open_database(url)
    try:
        assert isinstance(db, PostgresDatabase)
        row = await db.fetch_one("SELECT pg_backend_pid()")
        assert row is not None
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (row[0],))
        assert await db.fetch_one("SELECT ?", (41,)) == (41,)
        assert await db.fetch_one("SELECT pg_backend_pid()") != row
    finally:
        await db.close()
        drop_database(url)


async def test_open_database_picks_the_engine(database: Database, database_url: str) -> None:
    assert database.dialect == ("postgresql" if database_url.startswith("postgresql://") else "sqlite")


def _state(db: PostgresDatabase) -> BreakerState:
    """Read afresh each time (mypy would carry an earlier assertion's narrowing over)."""
    return db.breaker.state


@contextlib.asynccontextmanager
async def fresh_database(
    postgres_dsn: str, limits: DatabaseLimits
) -> AsyncIterator[tuple[PostgresDatabase, str]]:
    """A new database holding items `a` and `b`, opened with `limits`; and its URL, for a second client."""
    url = create_database(postgres_dsn)
    db = await open_database(url, limits)
    try:
        assert isinstance(db, PostgresDatabase)
        await db.migrate([ITEMS])
        await db.execute_many("INSERT INTO items (id, count) VALUES (?, ?)", [("a", 0), ("b", 0)])
        yield db, url
    finally:
        await db.close()
        drop_database(url)


async def test_a_statement_past_its_timeout_refuses_its_caller_only(postgres_dsn: str) -> None:
    """The server cancels a slow statement before the gateway's deadline, so it is known alive: 503 for that
    caller, and the breaker stays closed for everyone else."""
    async with fresh_database(postgres_dsn, DatabaseLimits(timeout_s=1.0, retry_after_s=30.0)) as (db, _):
        assert await db.fetch_one("SHOW statement_timeout") == ("500ms",)  # half the call's deadline
        with pytest.raises(DependencyUnavailable) as refused:
            await asyncio.wait_for(db.fetch_one("SELECT pg_sleep(30)"), timeout=10)
        assert (refused.value.status, refused.value.code) == (503, 3057)
        assert refused.value.retry_after_s == pytest.approx(30.0)
        assert isinstance(refused.value.__cause__, psycopg.errors.QueryCanceled)
        assert _state(db) is BreakerState.CLOSED
        assert await db.fetch_one("SELECT ?", (1,)) == (1,)  # asked at once, not skipped for 30 s


async def _wait_for_a_lock_waiter(url: str) -> None:
    """Until a statement waits for a lock (on a connection of its own: a transaction sees one snapshot of it)."""
    waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as watcher:
        for _ in range(200):
            cursor = await watcher.execute(waiting)
            if await cursor.fetchone() != (0,):
                return
            await asyncio.sleep(0.05)
    raise AssertionError("no statement came to wait for the lock")


async def test_a_deadlock_refuses_its_caller_only(postgres_dsn: str) -> None:
    """Two writers lock the same rows in opposite orders (as two gateways' usage batches can): the server aborts
    one with a deadlock. Its caller gets 503; the server is alive, so the breaker stays closed."""
    # A statement may run 3 s, past the 1 s of deadlock_timeout after which the server looks for a deadlock.
    limits = DatabaseLimits(timeout_s=6.0, retry_after_s=30.0)
    async with (
        fresh_database(postgres_dsn, limits) as (db, url),
        await psycopg.AsyncConnection.connect(url) as other,
    ):
        await other.execute("SET deadlock_timeout = '30s'")  # so the gateway's statement is the one aborted
        await other.execute("UPDATE items SET count = count + 1 WHERE id = 'a'")
        batch = asyncio.ensure_future(
            db.execute_many("UPDATE items SET count = count + 1 WHERE id = ?", [("b",), ("a",)])
        )
        await _wait_for_a_lock_waiter(url)
        await asyncio.wait_for(other.execute("UPDATE items SET count = count + 1 WHERE id = 'b'"), timeout=20)
        await other.commit()
        with pytest.raises(DependencyUnavailable) as refused:
            await asyncio.wait_for(batch, timeout=20)
        assert isinstance(refused.value.__cause__, psycopg.errors.DeadlockDetected)
        assert _state(db) is BreakerState.CLOSED
        assert await db.fetch_all("SELECT id, count FROM items ORDER BY id") == [("a", 1), ("b", 1)]


async def test_every_connection_in_use_refuses_the_caller_left_waiting_only(postgres_dsn: str) -> None:
    """A flood that holds every pooled connection: a caller that waited its share for one gets 503, the breaker
    stays closed, and the calls holding the connections finish."""
    limits = DatabaseLimits(timeout_s=6.0, retry_after_s=30.0, pool_size=1)
    async with (
        fresh_database(postgres_dsn, limits) as (db, url),
        await psycopg.AsyncConnection.connect(url, autocommit=True) as other,
    ):
        await other.execute("SELECT pg_advisory_lock(7)")
        holder = asyncio.ensure_future(db.fetch_one("SELECT pg_advisory_lock(7), 'held'"))
        await _wait_for_a_lock_waiter(url)
        with pytest.raises(DependencyUnavailable) as refused:
            await asyncio.wait_for(db.fetch_one("SELECT 1"), timeout=20)
        assert isinstance(refused.value.__cause__, PoolBusy)
        assert _state(db) is BreakerState.CLOSED
        await other.execute("SELECT pg_advisory_unlock(7)")
        assert await asyncio.wait_for(holder, timeout=20) == ("", "held")
        assert await db.fetch_one("SELECT ?", (2,)) == (2,)


async def test_a_probe_that_finds_the_server_busy_closes_the_breaker(postgres_dsn: str) -> None:
    async with fresh_database(postgres_dsn, DatabaseLimits(timeout_s=1.0, retry_after_s=0.2)) as (db, _):
        db.breaker.failed()  # as after an outage
        assert _state(db) is BreakerState.OPEN
        await asyncio.sleep(0.3)
        with pytest.raises(DependencyUnavailable) as refused:
            await asyncio.wait_for(db.fetch_one("SELECT pg_sleep(30)"), timeout=10)  # the probe
        assert isinstance(refused.value.__cause__, psycopg.errors.QueryCanceled)
        assert _state(db) is BreakerState.CLOSED
        assert await db.fetch_one("SELECT ?", (3,)) == (3,)


@pytest.mark.parametrize(
    ("error", "verdict"),
    [
        (psycopg.OperationalError("connection refused"), Verdict.OUTAGE),  # no SQLSTATE: no server reached
        (PoolTimeout("couldn't get a connection"), Verdict.OUTAGE),  # the pool could not connect
        (ConnectionDropped("closed"), Verdict.OUTAGE),
        (psycopg.errors.ConnectionFailure(), Verdict.OUTAGE),  # class 08
        (psycopg.errors.AdminShutdown(), Verdict.OUTAGE),
        (psycopg.errors.CrashShutdown(), Verdict.OUTAGE),
        (psycopg.errors.CannotConnectNow(), Verdict.OUTAGE),
        (psycopg.errors.TooManyConnections(), Verdict.OUTAGE),
        (psycopg.errors.QueryCanceled(), Verdict.BUSY),
        (psycopg.errors.DeadlockDetected(), Verdict.BUSY),
        (psycopg.errors.SerializationFailure(), Verdict.BUSY),
        (psycopg.errors.LockNotAvailable(), Verdict.BUSY),
        (psycopg.errors.DiskFull(), Verdict.BUSY),
        (psycopg.errors.DatabaseDropped(), Verdict.OUTAGE),
        (psycopg.errors.IoError(), Verdict.BUSY),  # any other failure the server reported: 503, not a 500
        (psycopg.errors.ObjectNotInPrerequisiteState(), Verdict.BUSY),
        (PoolBusy("every connection in use"), Verdict.NOT_REACHED),
        (psycopg.errors.UndefinedTable(), Verdict.CALLER),
        (psycopg.errors.UniqueViolation(), Verdict.CALLER),
        (
            psycopg.ProgrammingError("the query has 1 placeholder but 2 parameters were passed"),
            Verdict.CALLER,
        ),
        (ValueError("not a database error"), Verdict.CALLER),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else value.name,
)
def test_errors_are_judged_by_what_they_say_about_the_server(error: BaseException, verdict: Verdict) -> None:
    assert classify(error) is verdict


async def test_a_bad_statement_stays_its_own_error(postgres_dsn: str) -> None:
    url = create_database(postgres_dsn)
    db = await open_database(url)
    try:
        assert isinstance(db, PostgresDatabase)
        for _ in range(3):
            with pytest.raises(psycopg.errors.UndefinedTable):
                await db.fetch_all("SELECT * FROM no_such_table")
        assert db.breaker.state is BreakerState.CLOSED
        assert await db.fetch_one("SELECT 2") == (2,)
    finally:
        await db.close()
        drop_database(url)


async def test_opening_an_unreachable_server_is_unavailable() -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    with pytest.raises(DependencyUnavailable) as refused:
        await asyncio.wait_for(open_database(url, DatabaseLimits(timeout_s=1.0)), timeout=15)
    assert refused.value.retry_after_s is not None
    assert "127.0.0.1" not in refused.value.message  # the caller learns nothing of the address


async def test_a_sqlite_file_locked_by_another_process_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    db = SqliteDatabase.open(str(path), busy_timeout_s=0.1)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        await db.migrate([ITEMS])
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(DependencyUnavailable) as refused:
            await db.execute("INSERT INTO items (id, count) VALUES (?, ?)", ("a", 1))
        assert (refused.value.status, refused.value.code) == (503, 3057)
        holder.execute("ROLLBACK")
        assert await db.execute("INSERT INTO items (id, count) VALUES (?, ?)", ("a", 1)) == 1
        with pytest.raises(sqlite3.OperationalError):  # not busy: the statement's own error
            await db.fetch_all("SELECT * FROM no_such_table")
    finally:
        holder.close()
        await db.close()


SLOW_SELECT = (  # a SELECT that counts to three million: long enough that every other statement ends first
    "SELECT count(*) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000000)"
    " SELECT x FROM c)"
)


async def test_a_slow_sqlite_read_holds_up_neither_writes_nor_other_reads(tmp_path: Path) -> None:
    db = SqliteDatabase.open(str(tmp_path / "readers.db"))
    try:
        await db.migrate([ITEMS])
        ended: list[str] = []

        async def note(name: str, work: Awaitable[Any]) -> None:
            await work
            ended.append(name)

        slow = asyncio.create_task(note("slow read", db.fetch_one(SLOW_SELECT)))
        await asyncio.sleep(0.05)  # the slow read has a reader
        await note("write", db.execute("INSERT INTO items (id, count) VALUES (?, ?)", ("a", 1)))
        await note("read", db.fetch_one("SELECT count FROM items WHERE id = ?", ("a",)))
        await slow
        assert ended == ["write", "read", "slow read"]
        assert await db.fetch_one("SELECT count FROM items WHERE id = ?", ("a",)) == (1,)  # read its write
    finally:
        await db.close()


async def test_a_write_sent_as_a_sqlite_read_is_refused(tmp_path: Path) -> None:
    db = SqliteDatabase.open(str(tmp_path / "routed.db"))
    try:
        await db.migrate([ITEMS])
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            await db.fetch_all("INSERT INTO items (id, count) VALUES ('w', 7)")
        assert await db.fetch_one("SELECT count(*) FROM items") == (0,)
    finally:
        await db.close()


async def test_a_read_that_comes_while_sqlite_closes_is_refused_not_left_waiting(tmp_path: Path) -> None:
    """The close waits for the slow read to give its connection back; a read queued meanwhile is answered or
    refused, never left waiting for a connection no one will give back; a read after the close is refused."""
    db = SqliteDatabase.open(str(tmp_path / "closing.db"))
    await db.migrate([ITEMS])
    slow = asyncio.create_task(db.fetch_one(SLOW_SELECT))
    await asyncio.sleep(0.05)
    closing = asyncio.create_task(db.close())
    await asyncio.sleep(0.05)
    late = asyncio.create_task(db.fetch_one("SELECT count(*) FROM items"))
    assert await asyncio.wait_for(slow, 30) == (3000000,)
    try:
        assert await asyncio.wait_for(late, 30) == (0,)
    except sqlite3.ProgrammingError as refused:
        assert "closed" in str(refused)
    await asyncio.wait_for(closing, 30)
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        await db.fetch_one("SELECT count(*) FROM items")
