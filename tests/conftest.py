"""Shared fixtures for the real servers tests need: one PostgreSQL and one Redis per session (started only
when a test asks), and a fresh database per test on each engine.

`database` is parametrized over SQLite and PostgreSQL, so a store tested with it runs on both. The SQLite
case never starts PostgreSQL. Without PostgreSQL installed its cases are skipped, except under CI
(`CI=true`), where they fail.
"""

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from cirrus.db import open_database
from cirrus.db.database import Database
from tests.services.postgres import create_database, drop_database, running_postgres, unavailable_reason
from tests.services.redis import running_redis

ENGINES = ["sqlite", "postgresql"]


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """The DSN of a PostgreSQL server started for this test session (its `postgres` database)."""
    reason = unavailable_reason()
    if reason is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"PostgreSQL is required under CI: {reason}")
        pytest.skip(reason)
    with running_postgres() as dsn:
        yield dsn


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A redis-server on 127.0.0.1 for this test session, without persistence."""
    with running_redis() as url:
        yield url


@pytest.fixture(params=ENGINES)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL for `open_database`: a SQLite file in tmp_path, or a new empty PostgreSQL database."""
    if request.param == "sqlite":
        yield str(tmp_path / "cirrus.db")
        return
    url = create_database(request.getfixturevalue("postgres_dsn"))
    yield url
    drop_database(url)


@pytest_asyncio.fixture(loop_scope="function")
async def database(database_url: str) -> AsyncIterator[Database]:
    """An open `Database` on an empty database, closed after the test; runs on the test's own event loop."""
    db = await open_database(database_url)
    try:
        yield db
    finally:
        await db.close()
