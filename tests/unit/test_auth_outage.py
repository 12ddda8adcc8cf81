"""Authentication and account lookups while the database is unavailable, with an injected clock: what this
gateway checked recently keeps working for the stale-if-error window, anything else fails closed with 503."""

from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from cirrus.auth.cache import CachedAuthenticator
from cirrus.auth.principal import Principal
from cirrus.auth.store import IdentityStore
from cirrus.db.database import Database, Params, Row
from cirrus.db.sqlite import SqliteDatabase
from cirrus.errors import DependencyUnavailable
from cirrus.gateway.components import NodeAuthenticator, TimedLookup
from cirrus.server.auth import AuthMiddleware


class Clock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def outage() -> DependencyUnavailable:
    return DependencyUnavailable("The database is unavailable", retry_after_s=2.0)


class FlakyStore:
    """A token store that answers from a dictionary, or fails as an unavailable database does."""

    def __init__(self, answers: dict[str, Principal]) -> None:
        self.answers = answers
        self.down = False
        self.lookups = 0

    async def authenticate(self, secret: str) -> Principal | None:
        self.lookups += 1
        if self.down:
            raise outage()
        return self.answers.get(secret)


class FlakyDatabase:
    """A real database that can be switched off: every call then fails as an unavailable one does."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self.dialect = db.dialect
        self.down = False
        self.calls = 0

    def _check(self) -> None:
        self.calls += 1
        if self.down:
            raise outage()

    async def execute(self, sql: str, params: Params = ()) -> int:
        self._check()
        return await self._db.execute(sql, params)

    async def execute_many(self, sql: str, rows: Sequence[Params]) -> None:
        self._check()
        await self._db.execute_many(sql, rows)

    async def fetch_all(self, sql: str, params: Params = ()) -> list[Row]:
        self._check()
        return await self._db.fetch_all(sql, params)

    async def fetch_one(self, sql: str, params: Params = ()) -> Row | None:
        self._check()
        return await self._db.fetch_one(sql, params)

    async def migrate(self, statements: Sequence[str]) -> None:
        self._check()
        await self._db.migrate(statements)

    async def close(self) -> None:
        await self._db.close()


PRINCIPAL = Principal(account_id="a", token_id="t", token_name="n")


async def test_a_checked_token_outlives_an_outage_for_the_stale_window_only() -> None:
    store, clock = FlakyStore({"good": PRINCIPAL}), Clock()
    cache = CachedAuthenticator(store, ttl_s=2.0, clock=clock, stale_if_error_s=60.0)
    assert await cache.authenticate("good") == PRINCIPAL
    store.down = True
    clock.now = 1.0
    assert await cache.authenticate("good") == PRINCIPAL  # fresh: the store is not even asked
    assert store.lookups == 1
    clock.now = 30.0
    assert await cache.authenticate("good") == PRINCIPAL  # stale, and the store cannot say otherwise
    assert store.lookups == 2
    clock.now = 61.9
    assert (
        await cache.authenticate("good") == PRINCIPAL
    )  # its age counts from the last answer, not the last use
    clock.now = 62.0
    with pytest.raises(DependencyUnavailable):
        await cache.authenticate("good")  # past ttl + stale window: no longer trusted


async def test_an_unchecked_token_fails_closed_with_a_clear_503() -> None:
    store = FlakyStore({"good": PRINCIPAL})
    store.down = True
    cache = CachedAuthenticator(store, ttl_s=2.0, clock=Clock(), stale_if_error_s=60.0)
    with pytest.raises(DependencyUnavailable) as refused:
        await cache.authenticate("good")
    assert (refused.value.status, refused.value.code) == (503, 3057)
    assert refused.value.retry_after_s == 2.0
    assert "Authentication is unavailable" in refused.value.message


async def test_a_stale_answer_is_used_only_while_the_store_fails() -> None:
    store, clock = FlakyStore({"good": PRINCIPAL}), Clock()
    cache = CachedAuthenticator(store, ttl_s=2.0, clock=clock, stale_if_error_s=60.0)
    assert await cache.authenticate("good") == PRINCIPAL
    assert await cache.authenticate("bad") is None
    store.answers.pop("good")  # revoked
    clock.now = 5.0
    assert await cache.authenticate("good") is None  # the store answers: the revocation holds at once
    store.down = True
    assert await cache.authenticate("bad") is None  # a stale miss stays a 401, not a 503
    store.down = False
    store.answers["good"] = PRINCIPAL
    clock.now = 7.1
    assert await cache.authenticate("good") == PRINCIPAL


async def test_without_a_stale_window_an_outage_refuses_every_token_past_its_ttl() -> None:
    store, clock = FlakyStore({"good": PRINCIPAL}), Clock()
    cache = CachedAuthenticator(store, ttl_s=2.0, clock=clock)
    assert await cache.authenticate("good") == PRINCIPAL
    store.down = True
    clock.now = 2.0
    with pytest.raises(DependencyUnavailable):
        await cache.authenticate("good")


async def test_an_expired_token_stays_expired_during_an_outage() -> None:
    wall = Clock(100.0)
    expiring = Principal(account_id="a", token_id="t", token_name="n", expires_at=150.0)
    store, clock = FlakyStore({"good": expiring}), Clock()
    cache = CachedAuthenticator(store, ttl_s=2.0, clock=clock, wall_clock=wall, stale_if_error_s=60.0)
    assert await cache.authenticate("good") == expiring
    store.down, clock.now, wall.now = True, 10.0, 150.0
    assert await cache.authenticate("good") is None


async def _identities(tmp_path: Path) -> tuple[FlakyDatabase, IdentityStore]:
    db = FlakyDatabase(SqliteDatabase.open(str(tmp_path / "cirrus.db")))
    identity = IdentityStore(db)
    await identity.migrate()
    return db, identity


async def test_open_mode_keeps_its_last_answer_and_never_guesses_open(tmp_path: Path) -> None:
    db, identity = await _identities(tmp_path)
    try:
        never_asked = NodeAuthenticator(identity, ttl_s=0, open_allowed=True, stale_if_error_s=60)
        asked = NodeAuthenticator(identity, ttl_s=0, open_allowed=True, stale_if_error_s=60)
        assert not await asked.requires_token()
        db.down = True
        with pytest.raises(DependencyUnavailable):
            await never_asked.requires_token()  # fail closed: a 503, never open by default
        assert not await asked.requires_token()  # its last answer: still no token here
        assert await NodeAuthenticator(identity, ttl_s=0, open_allowed=False).requires_token()
    finally:
        await db.close()


async def test_once_a_token_exists_open_mode_never_asks_again(tmp_path: Path) -> None:
    db, identity = await _identities(tmp_path)
    try:
        node = NodeAuthenticator(identity, ttl_s=0, open_allowed=True)
        account = await identity.create_account("acme")
        secret, _ = await identity.create_token(account.id, "ci")
        assert await node.requires_token()
        db.down = True
        calls = db.calls
        assert await node.requires_token()
        assert db.calls == calls
        with pytest.raises(DependencyUnavailable):
            await node.authenticate(secret)  # never checked by this node: fail closed
    finally:
        await db.close()


async def test_a_lookup_falls_back_to_its_last_answer_however_old() -> None:
    clock = Clock()
    lookup = TimedLookup(ttl_s=2.0, clock=clock)
    answers: dict[str, object] = {"acct": "paid"}
    down = False

    async def load(key: str) -> object:
        if down:
            raise outage()
        return answers.get(key)

    assert await lookup.get_or_load("acct", lambda: load("acct")) == "paid"
    answers["acct"] = "free"
    clock.now = 1.0
    assert await lookup.get_or_load("acct", lambda: load("acct")) == "paid"  # fresh for its ttl
    clock.now = 3600.0
    down = True
    assert await lookup.get_or_load("acct", lambda: load("acct")) == "paid"  # the last known value
    with pytest.raises(DependencyUnavailable):
        await lookup.get_or_load("other", lambda: load("other"))  # never known: 503
    down = False
    assert await lookup.get_or_load("acct", lambda: load("acct")) == "free"


class Refusing:
    """An authenticator whose store fails as `error` says."""

    def __init__(self, error: Exception, in_requires_token: bool = False) -> None:
        self.error = error
        self.in_requires_token = in_requires_token

    async def requires_token(self) -> bool:
        if self.in_requires_token:
            raise self.error
        return True

    async def authenticate(self, secret: str) -> Principal | None:
        raise self.error

    def authenticator(self) -> "Refusing":
        return self


async def _never_reached(scope: Scope, receive: Receive, send: Send) -> None:
    raise AssertionError("the app was reached without a principal")


async def _ask(source: Refusing, path: str) -> httpx.Response:
    app = AuthMiddleware(_never_reached, source, metrics_need_token=False)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        return await client.post(path, json={}, headers={"Authorization": "Bearer cirrus_x"})


@pytest.mark.parametrize("in_requires_token", [False, True])
async def test_the_middleware_answers_an_outage_with_a_503_in_each_protocol(in_requires_token: bool) -> None:
    source = Refusing(outage(), in_requires_token)
    workers_ai = await _ask(source, "/ai/run/@cf/meta/llama")
    assert workers_ai.status_code == 503 and workers_ai.headers["retry-after"] == "2"
    assert workers_ai.json()["errors"][0]["code"] == 3057
    openai = await _ask(source, "/v1/chat/completions")
    assert openai.status_code == 503 and openai.headers["retry-after"] == "2"
    assert openai.json()["error"]["code"] == "service_unavailable"


async def test_an_unexpected_failure_is_a_json_500_never_a_plain_text_page() -> None:
    response = await _ask(Refusing(RuntimeError("a bug")), "/v1/chat/completions")
    assert response.status_code == 500
    assert response.headers["content-type"].startswith("application/json")
    assert "a bug" not in response.text
