"""AI Search's ingest survives a restart: files are uploaded without waiting, the gateway is stopped (SIGTERM)
while some are indexed and others still queued or running, and started again on the same state folder and
database. At the stop every unfinished item was given back with nothing of it in the index; after the restart
every item ends `completed` once, with the chunks a clean ingest of the same file gives, and search finds each
file."""

import asyncio
import signal
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import pytest

from cirrus.db import open_database
from cirrus.rag.model import ItemState
from cirrus.rag.store import RagStore
from tests.integration.ai_search_calls import (
    create_instance,
    items,
    search,
    upload,
    write_ai_search_catalog,
)
from tests.integration.gateway import Identities, provision
from tests.integration.server import Server, running_server, wait_until

pytestmark = pytest.mark.integration

INSTANCE = "restart"
SECTIONS = (
    44  # a chunk each at the smallest chunk size (two embedding calls per file), all found by one search
)
STOP_TIMEOUT_S = 30.0
INGEST_TIMEOUT_S = 60.0
WEATHER = ("calm", "foggy", "stormy", "bright", "drizzly")


@dataclass(frozen=True)
class Logbook:
    subject: str  # in every chunk (its heading), and in no other file
    duty: str
    question: str

    @property
    def key(self) -> str:
        return f"logs/{self.subject}.md"

    def data(self) -> bytes:
        entries = [
            f"## Entry {day}\n\nOn day {day} the {self.subject} crew {self.duty}. The weather was "
            f"{WEATHER[day % len(WEATHER)]} and {day * 7} visitors came."
            for day in range(1, SECTIONS + 1)
        ]
        return "\n\n".join([f"# The {self.subject} logbook", *entries]).encode()


LOGBOOKS = (
    Logbook("lighthouse", "trimmed the lamp wick and polished the lens", "Who polishes the lamp's lens?"),
    Logbook("vineyard", "pruned the grapevines and pressed the harvest", "When were the grapes pressed?"),
    Logbook("observatory", "aligned the telescope mirror on Jupiter", "Who points the telescope at planets?"),
    Logbook("bakery", "kneaded rye dough and fired the bread oven", "Who bakes the rye loaves?"),
    Logbook("glacier", "measured the ice flow with survey stakes", "How fast does the ice move?"),
    Logbook("orchestra", "rehearsed the symphony and tuned the violins", "Who tunes the violins?"),
    Logbook("railway", "greased the locomotive wheels and checked signals", "Who maintains the locomotives?"),
    Logbook("apiary", "smoked the hives and harvested honeycomb", "Who collects the honey from the hives?"),
    Logbook("harbour", "moored the fishing trawlers and mended nets", "Who repairs the fishing nets?"),
    Logbook("greenhouse", "watered the orchids and misted the ferns", "Who looks after the orchids?"),
)


@dataclass(frozen=True)
class AtTheStop:
    """What the database held once the stopped gateway had exited."""

    states: dict[str, ItemState]  # by key
    chunks_of_unfinished: dict[str, int]  # chunks in the index of each item not completed


@dataclass(frozen=True)
class Restarted:
    ids: Identities
    server: Server
    uploaded: dict[str, str]  # key -> item id, as the uploads answered
    at_the_stop: AtTheStop


@pytest.fixture(scope="module")
def restarted(tmp_path_factory: pytest.TempPathFactory, minilm_gguf: Path) -> Iterator[Restarted]:
    directory = tmp_path_factory.mktemp("ai-search-restart")
    database = str(directory / "cirrus.db")
    ids = provision(database)
    catalog = write_ai_search_catalog(directory / "catalog.toml", minilm_gguf)

    def gateway() -> AbstractContextManager[Server]:
        return running_server(directory, "--catalog", str(catalog), database=database, auth_cache_ttl_s="0")

    with gateway() as first:
        create_instance(first, ids.run, INSTANCE, chunk_size=64, hybrid_search_enabled=True)
        uploaded = {
            b.key: upload(first, ids.run, INSTANCE, b.key, b.data(), wait=False)["id"] for b in LOGBOOKS
        }
        assert wait_until(lambda: _completed(first, ids) >= 1, INGEST_TIMEOUT_S), first.log()[-3000:]
        _stop(first)
    at_the_stop = asyncio.run(_read_at_the_stop(database, ids.account_a))
    with gateway() as second:
        yield Restarted(ids, second, uploaded, at_the_stop)


def _completed(server: Server, ids: Identities) -> int:
    return sum(item["status"] == "completed" for item in items(server, ids.run, INSTANCE))


def _stop(server: Server) -> None:
    """SIGTERM, as a supervisor stops it: the gateway shuts down on its own, its ingest giving items back."""
    server.process.send_signal(signal.SIGTERM)
    server.process.wait(timeout=STOP_TIMEOUT_S)
    # uvicorn re-raises the signal once it has shut down, so the exit status says SIGTERM either way
    assert "Application shutdown complete" in server.log(), server.log()[-3000:]


async def _read_at_the_stop(database: str, account_id: str) -> AtTheStop:
    db = await open_database(database)
    try:
        store = await RagStore.open(db)
        instance = await store.instance(account_id, INSTANCE)
        assert instance is not None
        listed = await store.items(instance)
        states = {item.key: item.state for item in listed}
        ids = {item.key: item.id for item in listed}
        unfinished = {}
        for logbook in LOGBOOKS:
            if states[logbook.key] is not ItemState.COMPLETED:
                only = frozenset({ids[logbook.key]})
                hits = await store.index.keyword(instance.uid, logbook.subject, 50, items=only)
                unfinished[logbook.key] = len(hits)
        return AtTheStop(states, unfinished)
    finally:
        await db.close()


def test_the_stop_landed_mid_ingest_and_gave_every_unfinished_item_back(restarted: Restarted) -> None:
    states = restarted.at_the_stop.states
    assert set(states) == {logbook.key for logbook in LOGBOOKS}
    assert ItemState.COMPLETED in states.values()
    assert restarted.at_the_stop.chunks_of_unfinished, f"the stop came after the ingest had ended: {states}"
    assert ItemState.RUNNING not in states.values(), states  # given back to the queue, not left leased
    assert set(restarted.at_the_stop.chunks_of_unfinished.values()) == {0}  # never half a file indexed


def test_after_the_restart_every_item_completes_once_with_the_chunks_of_a_clean_ingest(
    restarted: Restarted,
) -> None:
    server, token = restarted.server, restarted.ids.run
    assert wait_until(lambda: _completed(server, restarted.ids) == len(LOGBOOKS), INGEST_TIMEOUT_S), items(
        server, token, INSTANCE
    )
    after = {item["key"]: item for item in items(server, token, INSTANCE)}
    assert {key: item["id"] for key, item in after.items()} == restarted.uploaded  # none added, none lost
    create_instance(server, token, "clean", chunk_size=64)
    for logbook in LOGBOOKS:
        clean = upload(server, token, "clean", logbook.key, logbook.data())
        assert clean["status"] == "completed", clean
        assert after[logbook.key]["chunks_count"] == clean["chunks_count"], logbook.key
        every_chunk = search(
            server,
            token,
            INSTANCE,
            logbook.subject,
            retrieval_type="keyword",
            max_num_results=50,
            filters={"filename": logbook.key},
        )
        positions = sorted(chunk["item"]["metadata"]["position"] for chunk in every_chunk)
        assert positions == list(range(clean["chunks_count"])), logbook.key  # each chunk once in the index


def test_after_the_restart_search_finds_each_file(restarted: Restarted) -> None:
    server, token = restarted.server, restarted.ids.run
    assert wait_until(lambda: _completed(server, restarted.ids) == len(LOGBOOKS), INGEST_TIMEOUT_S)
    for logbook in LOGBOOKS:
        found = search(server, token, INSTANCE, logbook.question, max_num_results=3)
        assert found and found[0]["item"]["key"] == logbook.key, (logbook.question, found[:1])
