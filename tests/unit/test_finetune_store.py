"""The finetune store on SQLite and PostgreSQL (as `database` gives them): finetunes per account, by id or name;
names unique within an account; at most `limit` per account; assets recorded until the finetune is ready, and
ready only with the assets it was converted from; `resolve` gives inference the adapter, or a clear 400."""

import asyncio
import re
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest

from cirrus.db import Database, Row
from cirrus.db.opening import is_postgres_url
from cirrus.db.postgres import to_pyformat
from cirrus.errors import InvalidInput
from cirrus.finetunes import Adapter, Asset, FinetuneStore
from cirrus.finetunes.errors import FinetuneAssetsMissing
from tests.unit.fakes import FakeClock

SMOLLM = "@cf/huggingface/smollm2-135m-instruct"
GEMMA = "@cf/google/gemma-3-270m"
CONFIG = "sha256:" + "c" * 64
WEIGHTS = "sha256:" + "w" * 64
ADAPTER = "sha256:" + "a" * 64


async def test_a_finetune_is_its_accounts_alone(database: Database) -> None:
    store = await FinetuneStore.open(database, clock=FakeClock())
    await FinetuneStore.open(database)  # the schema is idempotent
    made = await store.create("acct-a", "pirate", SMOLLM, "talks like a pirate")
    assert (made.name, made.model, made.description, made.ready, made.uploaded) == (
        "pirate",
        SMOLLM,
        "talks like a pirate",
        False,
        [],
    )
    assert await store.get("acct-a", made.id) == made
    assert await store.find("acct-a", "pirate") == made == await store.find("acct-a", made.id)
    assert await store.get("acct-b", made.id) is None
    assert await store.find("acct-b", "pirate") is None and await store.find("acct-b", made.id) is None
    assert await store.list("acct-b") == []
    assert not await store.delete("acct-b", made.id)
    assert await store.list("acct-a") == [made]
    assert await store.delete("acct-a", made.id)
    assert await store.list("acct-a") == []


async def test_a_name_is_unique_within_its_account_only(database: Database) -> None:
    store = await FinetuneStore.open(database)
    await store.create("acct-a", "pirate", SMOLLM, None)
    with pytest.raises(InvalidInput, match="already has a finetune named 'pirate'") as taken:
        await store.create("acct-a", "pirate", GEMMA, None)
    assert taken.value.param == "name"
    other = await store.create("acct-b", "pirate", SMOLLM, None)
    assert [f.id for f in await store.list("acct-b")] == [other.id]
    assert len(await store.list("acct-a")) == 1


async def test_an_account_holds_at_most_its_limit(database: Database) -> None:
    clock = FakeClock()
    store = await FinetuneStore.open(database, limit=3, clock=clock)
    made = []
    for n in range(3):
        made.append(await store.create("acct-a", f"tune-{n}", SMOLLM, None))
        clock.advance(1.0)
    with pytest.raises(InvalidInput, match="the account has 3 finetunes, the most it may have"):
        await store.create("acct-a", "tune-3", SMOLLM, None)
    assert [f.id for f in await store.list("acct-a")] == [f.id for f in made]  # oldest first
    await store.create("acct-b", "tune-0", SMOLLM, None)  # another account counts its own
    assert await store.delete("acct-a", made[0].id)
    assert (await store.create("acct-a", "tune-3", SMOLLM, None)).name == "tune-3"


class Uncommitted:
    """Another gateway's connection in the middle of a transaction: nothing written through it is seen by others
    until `commit`."""

    def __init__(self, url: str, postgres: psycopg.AsyncConnection[Any] | None) -> None:
        self.dialect = "postgresql" if postgres is not None else "sqlite"
        self._postgres = postgres
        self._sqlite = None if postgres is not None else sqlite3.connect(url, isolation_level=None)
        if self._sqlite is not None:
            self._sqlite.execute("BEGIN")

    async def _run(self, sql: str, params: Sequence[Any]) -> tuple[int, list[Row]]:
        if self._postgres is not None:
            cursor = await self._postgres.execute(to_pyformat(sql), tuple(params))
            rows = await cursor.fetchall() if cursor.description else []
            return cursor.rowcount, [tuple(row) for row in rows]
        assert self._sqlite is not None
        found = self._sqlite.execute(sql, tuple(params))
        return found.rowcount, [tuple(row) for row in found.fetchall()]

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        return (await self._run(sql, params))[0]

    async def execute_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        for row in rows:
            await self._run(sql, row)

    async def fetch_all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return (await self._run(sql, params))[1]

    async def fetch_one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        return next(iter(await self.fetch_all(sql, params)), None)

    async def migrate(self, statements: Sequence[str]) -> None:
        raise AssertionError("the test migrates through the gateway's own database")

    async def commit(self) -> None:
        if self._postgres is not None:
            await self._postgres.commit()
        elif self._sqlite is not None:
            self._sqlite.execute("COMMIT")

    async def close(self) -> None:
        if self._postgres is not None:
            await self._postgres.close()
        elif self._sqlite is not None:
            self._sqlite.close()


@asynccontextmanager
async def uncommitted(url: str) -> AsyncIterator[Uncommitted]:
    postgres = await psycopg.AsyncConnection.connect(url) if is_postgres_url(url) else None
    transaction = Uncommitted(url, postgres)
    try:
        yield transaction
    finally:
        await transaction.close()


async def until_blocked_or_done(task: "asyncio.Task[Any]", url: str) -> None:
    """Until `task`'s statement waits for a lock, or `task` is done. PostgreSQL shows its waiting statements;
    SQLite does not, so there the statement is given a moment to reach the lock."""
    if not is_postgres_url(url):
        await asyncio.wait({task}, timeout=0.2)
        return
    waiting = (
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE wait_event_type = 'Lock' AND datname = current_database()"
    )
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as watcher:
        while not task.done():
            if await (await watcher.execute(waiting)).fetchone() != (0,):
                return
            await asyncio.sleep(0.02)


async def test_creates_at_once_from_two_gateways_keep_to_the_limit(
    database: Database, database_url: str
) -> None:
    """One gateway's create is not yet committed when another's runs: the second must wait for the first and
    count it, rather than count what it saw committed when it began."""
    store = await FinetuneStore.open(database, limit=1)
    async with uncommitted(database_url) as other:
        await FinetuneStore(other, limit=1).create("acct-a", "first", SMOLLM, None)
        racing = asyncio.create_task(store.create("acct-a", "second", SMOLLM, None))
        await until_blocked_or_done(racing, database_url)
        await other.commit()
    with pytest.raises(InvalidInput, match="the account has 1 finetunes, the most it may have"):
        await racing
    assert [f.name for f in await store.list("acct-a")] == ["first"]
    assert (await store.create("acct-b", "first", SMOLLM, None)).name == "first"  # each account its own


async def test_assets_are_recorded_until_ready_and_ready_needs_the_converted_ones(database: Database) -> None:
    clock = FakeClock()
    store = await FinetuneStore.open(database, clock=clock)
    made = await store.create("acct-a", "pirate", SMOLLM, None)
    clock.advance(5.0)
    with_config = await store.set_asset(made.id, Asset.CONFIG, CONFIG)
    assert with_config is not None and with_config.uploaded == [Asset.CONFIG]
    assert with_config.missing == [Asset.WEIGHTS] and with_config.modified_at == made.created_at + 5.0
    both = await store.set_asset(made.id, Asset.WEIGHTS, WEIGHTS)
    assert both is not None and both.missing == [] and not both.ready
    replaced = await store.set_asset(made.id, Asset.WEIGHTS, "sha256:" + "e" * 64)
    assert not await store.mark_ready(both, ADAPTER, "/store/adapter")  # converted from the replaced weights
    assert replaced is not None and await store.mark_ready(replaced, ADAPTER, "/store/adapter")
    ready = await store.get("acct-a", made.id)
    assert ready is not None and ready.ready and ready.adapter_path == "/store/adapter"
    assert await store.set_asset(made.id, Asset.CONFIG, CONFIG) is None  # a ready finetune's assets stay
    assert await store.set_asset("no-such-id", Asset.CONFIG, CONFIG) is None


async def test_resolve_gives_the_adapter_of_a_ready_finetune_of_the_account_and_model(
    database: Database,
) -> None:
    store = await FinetuneStore.open(database)
    made = await store.create("acct-a", "pirate", SMOLLM, None)
    await store.set_asset(made.id, Asset.CONFIG, CONFIG)
    with pytest.raises(
        FinetuneAssetsMissing, match=re.escape("missing required files: upload adapter_model.safetensors")
    ) as early:
        await store.resolve("acct-a", SMOLLM, "pirate")
    assert (early.value.status, early.value.code, early.value.param) == (400, 3039, "lora")
    both = await store.set_asset(made.id, Asset.WEIGHTS, WEIGHTS)
    assert both is not None and await store.mark_ready(both, ADAPTER, "/store/adapter")
    expected = Adapter(made.id, "pirate", ADAPTER, "/store/adapter")
    assert await store.resolve("acct-a", SMOLLM, "pirate") == expected
    assert await store.resolve("acct-a", SMOLLM, made.id) == expected
    for account, model, ref, message in (
        ("acct-b", SMOLLM, "pirate", "no finetune 'pirate' in this account"),
        ("acct-b", SMOLLM, made.id, f"no finetune '{made.id}' in this account"),
        ("acct-a", SMOLLM, "parrot", "no finetune 'parrot' in this account"),
        ("acct-a", GEMMA, "pirate", f"was made for {SMOLLM}, not {GEMMA}"),
    ):
        with pytest.raises(InvalidInput, match=re.escape(message)) as refused:
            await store.resolve(account, model, ref)
        assert (refused.value.status, refused.value.param) == (400, "lora")
