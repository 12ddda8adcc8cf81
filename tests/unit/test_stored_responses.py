"""Stored responses in the gateway's database (SQLite and PostgreSQL, as `database` gives them): per account,
until their retention ends."""

from cirrus.db import Database
from cirrus.responses import StoredResponse, StoredResponses
from tests.unit.fakes import FakeClock

CONVERSATION = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]


def stored(response_id: str = "resp_1", account: str = "acct-a") -> StoredResponse:
    return StoredResponse(response_id, account, {"id": response_id, "output": []}, CONVERSATION)


async def test_a_stored_response_reads_back_until_its_retention_ends(database: Database) -> None:
    clock = FakeClock()
    store = await StoredResponses.open(database, retention_s=60.0, clock=clock)
    await StoredResponses.open(database, retention_s=60.0, clock=clock)  # the schema is idempotent
    await store.put(stored())
    assert await store.get("acct-a", "resp_1") == stored()
    clock.advance(59.9)
    assert await store.get("acct-a", "resp_1") == stored()
    clock.advance(0.1)
    assert await store.get("acct-a", "resp_1") is None
    assert not await store.delete("acct-a", "resp_1")
    assert await store.purge_expired() == 1
    assert await database.fetch_all("SELECT id FROM stored_responses") == []


async def test_another_account_neither_reads_nor_deletes_it(database: Database) -> None:
    store = await StoredResponses.open(database, retention_s=60.0, clock=FakeClock())
    await store.put(stored())
    assert await store.get("acct-b", "resp_1") is None
    assert not await store.delete("acct-b", "resp_1")
    assert await store.delete("acct-a", "resp_1")
    assert await store.get("acct-a", "resp_1") is None


ITEMS = [{"id": "msg_1", "type": "message"}, {"id": "fco_2", "type": "function_call_output"}]


async def test_input_items_keep_their_order_and_go_with_the_response(database: Database) -> None:
    clock = FakeClock()
    store = await StoredResponses.open(database, retention_s=60.0, clock=clock)
    await store.put(StoredResponse("resp_1", "acct-a", {"id": "resp_1"}, CONVERSATION, ITEMS))
    await store.put(StoredResponse("resp_2", "acct-a", {"id": "resp_2"}, CONVERSATION, ITEMS[:1]))
    assert await store.input_items("resp_1") == ITEMS
    assert await store.delete("acct-a", "resp_1")
    assert await store.input_items("resp_1") == []
    clock.advance(60.0)
    assert await store.purge_expired() == 1
    assert await database.fetch_all("SELECT response_id FROM stored_response_items") == []


async def test_a_response_whose_items_cannot_be_written_is_not_kept(database: Database) -> None:
    store = await StoredResponses.open(database, retention_s=60.0, clock=FakeClock())
    await store.put(StoredResponse("resp_1", "acct-a", {"id": "resp_1"}, CONVERSATION, ITEMS))
    duplicate = StoredResponse("resp_2", "acct-a", {"id": "resp_2"}, CONVERSATION, ITEMS)
    await database.execute(
        "INSERT INTO stored_response_items (response_id, position, item) VALUES (?, ?, ?)",
        ("resp_2", 1, "{}"),
    )
    try:
        await store.put(duplicate)
    except Exception:
        pass
    else:
        raise AssertionError("a clashing item row must fail the write")
    assert await store.get("acct-a", "resp_2") is None
