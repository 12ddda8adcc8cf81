"""The file store on SQLite and PostgreSQL (as `database` gives them): uploads per account, paged by creation
time; made files invisible until settled, dropped when empty, kept (deleted) when their account deletes them;
every file gone once it expires."""

from cirrus.db import Database
from cirrus.files import FileState, FileStore, MadeFile
from tests.unit.fakes import FakeClock

DAY_S = 86_400.0
MADE = [
    MadeFile("file-batch_1-output", "batch_output", "out.jsonl"),
    MadeFile("file-batch_1-errors", "batch_output", "err.jsonl"),
]


async def test_an_upload_reads_back_for_its_account_only(database: Database) -> None:
    clock = FakeClock()
    files = await FileStore.open(database, clock)
    await FileStore.open(database, clock)  # the schema is idempotent
    stored = await files.upload("acct-a", "batch", "in.jsonl", '{"a": "é"}\n', DAY_S)
    assert stored.id.startswith("file-") and stored.bytes == len('{"a": "é"}\n'.encode())
    assert (stored.created_at, stored.expires_at, stored.state) == (
        clock.now,
        clock.now + DAY_S,
        FileState.PROCESSED,
    )
    assert await files.get("acct-a", stored.id) == stored
    assert await files.content(stored) == '{"a": "é"}\n'
    assert await files.get("acct-b", stored.id) is None
    assert await files.list("acct-b", 10) == []
    assert not await files.delete("acct-b", stored.id)
    assert await files.delete("acct-a", stored.id)
    assert await files.get("acct-a", stored.id) is None
    assert not await files.delete("acct-a", stored.id)


async def test_files_list_by_creation_time_either_way_in_pages(database: Database) -> None:
    clock = FakeClock()
    files = await FileStore.open(database, clock)
    ids = []
    for n in range(5):
        ids.append((await files.upload("acct-a", "batch", f"{n}.jsonl", "{}\n", DAY_S)).id)
        clock.advance(1.0)
    newest_first = [f.id for f in await files.list("acct-a", 10)]
    assert newest_first == ids[::-1]
    assert [f.id for f in await files.list("acct-a", 2, after=ids[3])] == [ids[2], ids[1]]
    assert [f.id for f in await files.list("acct-a", 2, order="asc", after=ids[1])] == [ids[2], ids[3]]
    assert await files.list("acct-a", 2, after="file-unknown") == []
    assert await files.list("acct-a", 10, purpose="batch_output") == []


async def test_made_files_show_once_settled_and_stay_known_once_deleted(database: Database) -> None:
    clock = FakeClock()
    files = await FileStore.open(database, clock)
    await files.add_pending("acct-a", "batch_1", MADE, clock.now + DAY_S)
    output, errors = (made.id for made in MADE)
    assert await files.get("acct-a", output) is None and await files.list("acct-a", 10) == []
    assert await files.pending_sources("acct-a") == ["batch_1"]
    assert await files.pending_sources("acct-b") == []
    await files.settle(output, 42, clock.now + 5.0)
    await files.settle(output, 99, clock.now + 9.0)  # a second settle changes nothing
    await files.drop_pending(errors)
    settled = await files.get("acct-a", output)
    assert settled is not None and (settled.bytes, settled.created_at, settled.source) == (
        42,
        clock.now + 5.0,
        "batch_1",
    )
    assert await files.content(settled) is None  # made on read elsewhere
    assert [f.id for f in await files.list("acct-a", 10, purpose="batch_output")] == [output]
    assert await files.pending_sources("acct-a") == []
    assert await files.delete("acct-a", output)
    assert await files.get("acct-a", output) is None and await files.list("acct-a", 10) == []
    assert [(f.id, f.state) for f in await files.made_files("batch_1")] == [(output, FileState.DELETED)]


async def test_files_expire_and_are_purged(database: Database) -> None:
    clock = FakeClock()
    files = await FileStore.open(database, clock)
    upload = await files.upload("acct-a", "batch", "in.jsonl", "{}\n", 60.0)
    await files.add_pending("acct-a", "batch_1", MADE, clock.now + 120.0)
    clock.advance(60.0)
    assert await files.get("acct-a", upload.id) is None and await files.list("acct-a", 10) == []
    assert await files.purge_expired() == 1
    clock.advance(60.0)
    assert await files.made_files("batch_1") == []
    assert await files.purge_expired() == 2
    assert await database.fetch_all("SELECT id FROM files") == []
