"""Console sessions: the store on SQLite and PostgreSQL, and who a session acts as (ConsoleAccess)."""

import time
from dataclasses import dataclass

import pytest

from cirrus.auth import OPEN_PRINCIPAL, Permission
from cirrus.auth.store import IdentityStore
from cirrus.console.access import ConsoleAccess
from cirrus.console.session_store import SessionStore
from cirrus.db.database import Database
from cirrus.errors import Forbidden, NotReady
from cirrus.gateway.components import NodeAuthenticator

LIFETIME_S = 3600.0


class Clock:
    """Starts at the real time: the token cache in front of the identity store checks expiry by the real clock."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@dataclass
class Source:
    """The gateway parts ConsoleAccess reads, as a started gateway has them (or None before)."""

    db: Database | None
    identity_store: IdentityStore | None
    auth: NodeAuthenticator | None

    def authenticator(self) -> NodeAuthenticator | None:
        return self.auth

    def identity(self) -> IdentityStore | None:
        return self.identity_store

    def database(self) -> Database | None:
        return self.db


async def test_a_session_is_stored_read_and_deleted(database: Database) -> None:
    clock = Clock()
    store = await SessionStore.open(database, LIFETIME_S, clock)
    session = await store.create("tok_1", "acct")
    assert (session.token_id, session.account_id, session.expires_at) == (
        "tok_1",
        "acct",
        clock.now + LIFETIME_S,
    )
    assert await store.get(session.id) == session
    assert await store.get("not-a-session") is None
    assert await store.delete(session.id)
    assert await store.get(session.id) is None


async def test_the_cookie_secret_is_not_what_the_database_keeps(database: Database) -> None:
    store = await SessionStore.open(database, LIFETIME_S)
    session = await store.create("tok_1", "acct")
    rows = await database.fetch_all("SELECT id_sha256, csrf FROM console_sessions")
    assert len(rows) == 1 and session.id not in rows[0][0]
    assert rows[0][1] == session.csrf and session.csrf != session.id


async def test_a_session_expires_and_is_purged(database: Database) -> None:
    clock = Clock()
    store = await SessionStore.open(database, LIFETIME_S, clock)
    old = await store.create("tok_1", "acct")
    clock.now += LIFETIME_S
    assert await store.get(old.id) is None
    fresh = await store.create("tok_1", "acct")  # each sign-in removes the expired sessions
    assert await database.fetch_all("SELECT COUNT(*) FROM console_sessions") == [(1,)]
    assert await store.get(fresh.id) == fresh


async def _access(
    database: Database, clock: Clock, open_allowed: bool = False
) -> tuple[ConsoleAccess, IdentityStore]:
    identity = IdentityStore(database, clock=clock)
    await identity.migrate()
    source = Source(database, identity, NodeAuthenticator(identity, 0.0, open_allowed))
    return ConsoleAccess(source, LIFETIME_S, clock), identity


async def test_a_token_signs_in_and_its_session_acts_as_its_principal(database: Database) -> None:
    clock = Clock()
    access, identity = await _access(database, clock)
    account = await identity.create_account("alpha")
    secret, token = await identity.create_token(account.id, "alice", permissions=(Permission.RUN,))
    session = await access.sign_in(secret)
    assert session is not None and session.token_id == token.id and secret not in (session.id, session.csrf)
    user = await access.user(session.id)
    assert user is not None and user.principal == token.principal() and user.csrf == session.csrf
    assert not user.open_node
    assert await access.user(None) is None
    assert await access.user("forged") is None


async def test_unknown_revoked_and_expired_tokens_cannot_sign_in(database: Database) -> None:
    clock = Clock()
    access, identity = await _access(database, clock)
    account = await identity.create_account("alpha")
    revoked, info = await identity.create_token(account.id, "revoked")
    await identity.revoke_token(info.id)
    expired, _ = await identity.create_token(account.id, "expired", expires_in_s=10)
    clock.now += 10
    for secret in ("cirrus_unknown", revoked, expired):
        assert await access.sign_in(secret) is None


async def test_revoking_or_outliving_the_token_ends_its_sessions(database: Database) -> None:
    clock = Clock()
    access, identity = await _access(database, clock)
    account = await identity.create_account("alpha")
    first, first_info = await identity.create_token(account.id, "first")
    second, _ = await identity.create_token(account.id, "second", expires_in_s=60)
    revoked_session, expiring_session = await access.sign_in(first), await access.sign_in(second)
    assert revoked_session is not None and expiring_session is not None
    await identity.revoke_token(first_info.id)
    assert await access.user(revoked_session.id) is None
    clock.now += 60
    assert await access.user(expiring_session.id) is None


async def test_an_open_node_needs_no_session_but_keeps_a_csrf_token(database: Database) -> None:
    access, _ = await _access(database, Clock(), open_allowed=True)
    user = await access.user(None)
    assert user is not None and user.principal == OPEN_PRINCIPAL and user.open_node
    assert user.csrf == access.open_csrf and len(user.csrf) >= 32


async def test_the_api_takes_a_session_only_with_its_csrf_header(database: Database) -> None:
    access, identity = await _access(database, Clock())
    account = await identity.create_account("alpha")
    secret, token = await identity.create_token(account.id, "alice")
    session = await access.sign_in(secret)
    assert session is not None
    assert await access.api_principal(session.id, session.csrf) == token.principal()
    for csrf in (None, "", "forged", session.id):
        with pytest.raises(Forbidden):
            await access.api_principal(session.id, csrf)
    assert await access.api_principal("no-such-session", session.csrf) is None


async def test_before_the_gateway_is_open_the_console_is_not_ready() -> None:
    access = ConsoleAccess(Source(None, None, None), LIFETIME_S)
    with pytest.raises(NotReady):
        await access.user("anything")
