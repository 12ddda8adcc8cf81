"""Fixtures shared by unit tests."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from cirrus.db.sqlite import SqliteDatabase
from cirrus.metering.store import UsageStore


@pytest_asyncio.fixture(loop_scope="function")
async def store(tmp_path: Path) -> AsyncIterator[UsageStore]:
    """A usage store on a fresh SQLite file."""
    db = SqliteDatabase.open(str(tmp_path / "cirrus.db"))
    usage_store = UsageStore(db)
    await usage_store.migrate()
    yield usage_store
    await db.close()
