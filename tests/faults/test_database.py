"""PostgreSQL stopped, restarted, frozen (SIGSTOP) and thawed, and the gateway SIGKILLed after a burst, each under a
real `cirrus serve` with a PostgreSQL server of its own.

What must hold while the database is gone: a token this gateway checked recently keeps being served (200) from
its cache, a token it never checked is refused with 503 / 3057 and `Retry-After` in the caller's envelope, no
request waits past its time limit, and every answered request is metered: its record waits in the unwritten-usage
file and reaches the database by itself once the database is back, as does service for every token. A SIGKILL
loses at most the records of the last write batch (the meter writes every 0.2 s).
"""

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest

from cirrus.db import DatabaseLimits, open_database
from cirrus.db.postgres import PostgresDatabase
from cirrus.errors import DependencyUnavailable
from tests.integration.gateway import SMOLLM, Identities, bearer, provision, write_gateway_catalog
from tests.integration.server import Server, kill_now, running_server, wait_until
from tests.services.postgres import PostgresServer, create_database, dedicated_postgres

DATABASE_TIMEOUT_S = 1.0
RETRY_AFTER_S = 1.0
REQUEST_TIMEOUT_S = 5.0
MARGIN_S = 3.0  # the machine is slow and shared
# Bound on "resumes by itself": the breaker's probe, the pool's reconnect, the meter's replay.
RECOVERY_S = 30.0
# What a SIGKILL may lose: the requests that ended within one flush interval of it, plus the write's own time and
# the event loop's lag on a loaded machine.
BURST = 30
PROMPT = {"prompt": "Say hi", "max_tokens": 1, "temperature": 0}
CHAT = {"model": SMOLLM, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "temperature": 0}


@dataclass(frozen=True)
class Database:
    server: PostgresServer
    url: str
    ids: Identities


@dataclass(frozen=True)
class Answer:
    request_id: str
    status: int
    body: dict[str, object]
    retry_after: str | None
    seconds: float
    ended_at: float


@pytest.fixture(scope="module")
def database() -> Iterator[Database]:
    with dedicated_postgres() as server:
        url = create_database(server.dsn)
        yield Database(server, url, provision(url))


@contextlib.contextmanager
def gateway(directory: Path, db: Database) -> Iterator[Server]:
    catalog = str(write_gateway_catalog(directory))
    with running_server(
        directory,
        "--catalog",
        catalog,
        database=db.url,
        request_timeout_s=str(REQUEST_TIMEOUT_S),
        database_timeout_s=str(DATABASE_TIMEOUT_S),
        database_retry_after_s=str(RETRY_AFTER_S),
        auth_cache_ttl_s="1",
        spare_workers="0",
    ) as server:
        yield server


def ask(server: Server, token: str, chat: bool = False) -> Answer:
    request_id = f"db-fault-{uuid.uuid4().hex}"
    path, body = ("/v1/chat/completions", CHAT) if chat else (f"/ai/run/{SMOLLM}", PROMPT)
    headers = {**bearer(token), "x-request-id": request_id}
    started = time.monotonic()
    response = httpx.post(f"{server.url}{path}", json=body, headers=headers, timeout=60)
    ended = time.monotonic()
    return Answer(
        request_id,
        response.status_code,
        response.json(),
        response.headers.get("retry-after"),
        ended - started,
        ended,
    )


def assert_within_the_limit(answers: list[Answer]) -> None:
    slowest = max(answer.seconds for answer in answers)
    assert slowest < REQUEST_TIMEOUT_S + MARGIN_S, f"a request waited {slowest:.2f}s"


def assert_cached_tokens_served(server: Server, token: str) -> list[Answer]:
    answers = [ask(server, token, chat) for chat in (False, True, False, True)]
    assert [answer.status for answer in answers] == [200] * 4, [a.body for a in answers]
    assert_within_the_limit(answers)
    return answers


def assert_unchecked_token_refused(server: Server, token: str) -> None:
    workers_ai, openai = ask(server, token), ask(server, token, chat=True)
    assert_within_the_limit([workers_ai, openai])
    assert workers_ai.status == openai.status == 503
    assert workers_ai.body["success"] is False
    errors = workers_ai.body["errors"]
    assert isinstance(errors, list) and [error["code"] for error in errors] == [3057]
    assert "unavailable" in errors[0]["message"]
    error = openai.body["error"]
    assert isinstance(error, dict) and (error["type"], error["code"]) == (
        "server_error",
        "service_unavailable",
    )
    for answer in (workers_ai, openai):
        assert answer.retry_after is not None and int(answer.retry_after) >= 1


def metered(db: Database, request_ids: list[str]) -> set[str]:
    with psycopg.connect(db.url, autocommit=True, connect_timeout=5) as connection:
        rows = connection.execute(
            "SELECT request_id FROM usage_events WHERE request_id = ANY(%s)", (request_ids,)
        ).fetchall()
    return {row[0] for row in rows}


def unwritten_files(server_dir: Path) -> list[Path]:
    return sorted((server_dir / "state").glob("usage-unwritten.jsonl*"))


def assert_recovers(
    server: Server, db: Database, server_dir: Path, token: str, answered: list[Answer]
) -> None:
    """Service for a token never checked, and the usage of every request answered meanwhile, come back alone."""
    assert wait_until(lambda: ask(server, token).status == 200, RECOVERY_S), "service did not resume"
    ids = [answer.request_id for answer in answered]
    assert wait_until(lambda: metered(db, ids) == set(ids), RECOVERY_S), (
        f"{len(set(ids) - metered(db, ids))} of {len(ids)} requests answered during the outage were not metered"
    )
    assert wait_until(lambda: not unwritten_files(server_dir), RECOVERY_S)


def test_the_database_layer_fails_fast_and_recovers_by_itself(database: Database) -> None:
    """Below the gateway: stopped and frozen, a call waits at most its deadline, then calls fail at once; the
    pool finds the restarted or thawed server again without being reopened."""
    server = database.server

    async def scenario() -> None:
        limits = DatabaseLimits(timeout_s=DATABASE_TIMEOUT_S, retry_after_s=5.0)
        db = await open_database(database.url, limits)
        assert isinstance(db, PostgresDatabase)
        try:
            for break_it, mend_it in ((server.stop, server.start), (server.freeze, server.resume)):
                assert await db.fetch_one("SELECT 1") == (1,)
                break_it()
                try:
                    timings, messages = [], []
                    for _ in range(5):
                        started = time.monotonic()
                        with pytest.raises(DependencyUnavailable) as refused:
                            await db.fetch_one("SELECT 1")
                        timings.append(time.monotonic() - started)
                        messages.append(refused.value.message)
                    assert max(timings) < DATABASE_TIMEOUT_S + MARGIN_S, timings
                    # the failure opened the breaker: the calls after it did not ask the database at all
                    assert ["failed recently" in message for message in messages] == [False] + [True] * 4
                finally:
                    mend_it()
                deadline = time.monotonic() + RECOVERY_S
                while time.monotonic() < deadline:
                    with contextlib.suppress(DependencyUnavailable):
                        if await db.fetch_one("SELECT ?", (2,)) == (2,):
                            break
                    await asyncio.sleep(0.2)
                assert await db.fetch_one("SELECT ?", (3,)) == (3,)
        finally:
            await db.close()

    asyncio.run(scenario())


def test_a_gateway_rides_out_a_stopped_then_frozen_database(tmp_path: Path, database: Database) -> None:
    server_db, ids = database.server, database.ids
    with gateway(tmp_path, database) as server:
        warm = assert_cached_tokens_served(server, ids.run)  # the cold start, and the token in the cache
        faults = (
            (server_db.stop, server_db.start, ids.other),
            (server_db.freeze, server_db.resume, ids.collector),
        )
        for break_it, mend_it, unchecked in faults:
            time.sleep(1.2)  # past the auth cache's ttl: the stale-if-error window is what serves now
            break_it()
            try:
                answered = assert_cached_tokens_served(server, ids.run)
                assert_unchecked_token_refused(server, unchecked)
                answered += assert_cached_tokens_served(server, ids.run)
                slowest = max(answer.seconds for answer in answered)
                print(f"database {break_it.__name__}: slowest cached-token request {slowest:.2f}s")
                kept = wait_until(lambda: bool(unwritten_files(tmp_path)), 10.0)  # after the meter's retries
                assert kept, "the usage of the outage was not kept aside"
            finally:
                mend_it()
            assert_recovers(server, database, tmp_path, unchecked, warm + answered)


def test_a_sigkill_right_after_a_burst_loses_no_usage(tmp_path: Path, database: Database) -> None:
    """Every answered request was journaled before its answer ended (metering/journal.py), so a gateway killed
    before its meter wrote the last batch loses none of it: the restart recovers the journal and writes it."""
    with gateway(tmp_path, database) as server:
        burst = [ask(server, database.ids.run) for _ in range(BURST)]
        kill_now(server)
    assert [answer.status for answer in burst] == [200] * BURST
    ids = {answer.request_id for answer in burst}
    with gateway(tmp_path, database):  # the same state folder and database, as a supervisor would restart it
        wait_until(lambda: metered(database, list(ids)) == ids, RECOVERY_S)
        lost = ids - metered(database, list(ids))
    assert not lost, f"{len(lost)} of {BURST} answered requests missing from usage after the SIGKILL"
