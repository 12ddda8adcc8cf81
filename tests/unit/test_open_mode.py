"""An open node (no tokens) serves loopback only, unless the operator says otherwise."""

import pytest

from cirrus.auth.store import IdentityStore
from cirrus.db import Database
from cirrus.gateway.components import NodeAuthenticator
from cirrus.gateway.open_mode import is_loopback, is_loopback_host, open_mode_refusal


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost"])
def test_loopback_addresses(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "example.com", ""])
def test_other_addresses(host: str) -> None:
    assert not is_loopback(host)


def test_an_open_node_on_loopback_starts() -> None:
    assert open_mode_refusal("127.0.0.1", has_tokens=False, allow_open=False) is None


def test_an_open_node_on_any_other_address_is_refused_with_what_to_do() -> None:
    refusal = open_mode_refusal("0.0.0.0", has_tokens=False, allow_open=False)
    assert refusal is not None and "--allow-open" in refusal and "cirrus tokens create" in refusal


def test_tokens_or_an_explicit_allowance_let_it_start_anywhere() -> None:
    assert open_mode_refusal("0.0.0.0", has_tokens=True, allow_open=False) is None
    assert open_mode_refusal("0.0.0.0", has_tokens=False, allow_open=True) is None


async def test_a_node_runs_open_only_where_allowed_and_only_without_tokens(database: Database) -> None:
    identity = IdentityStore(database)
    await identity.migrate()
    loopback = NodeAuthenticator(identity, ttl_s=0, open_allowed=True)
    public = NodeAuthenticator(identity, ttl_s=0, open_allowed=False)
    assert not await loopback.requires_token()
    assert await public.requires_token()  # never open on a network address, even with no token at all
    account = await identity.create_account("acme")
    secret, token = await identity.create_token(account.id, "ci")
    assert await loopback.requires_token()
    principal = await loopback.authenticate(secret)
    assert principal is not None and principal.token_id == token.id
    await identity.revoke_token(token.id)
    assert await loopback.requires_token() and await public.requires_token()  # never open again


async def test_a_token_this_gateway_revoked_is_refused_at_once_despite_the_cache(database: Database) -> None:
    identity = IdentityStore(database)
    await identity.migrate()
    node = NodeAuthenticator(identity, ttl_s=600, open_allowed=False)
    account = await identity.create_account("acme")
    secret, token = await identity.create_token(account.id, "colleague")
    assert await node.authenticate(secret) is not None
    await identity.revoke_token(token.id)
    # Cached: a revocation made elsewhere waits out the ttl here.
    assert await node.authenticate(secret) is not None
    node.forget_tokens()
    assert await node.authenticate(secret) is None


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1:8787", True),
        ("localhost", True),
        ("[::1]:8787", True),
        ("127.3.2.1", True),
        ("attacker.example:8787", False),
        ("10.0.0.5:8787", False),
        ("", False),
    ],
)
def test_a_host_header_names_loopback_or_not(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback
