"""Accounts and API tokens on both engines, the authentication cache, and the `accounts`/`tokens` commands."""

import argparse
import json
import re
from pathlib import Path

import pytest
import pytest_asyncio

from cirrus.auth.cache import CachedAuthenticator
from cirrus.auth.cli import parse_duration, register
from cirrus.auth.principal import Permission, Principal
from cirrus.auth.secrets import TOKEN_PREFIX, hash_secret
from cirrus.auth.store import AccountExists, IdentityStore, Plan, UnknownAccount
from cirrus.db.database import Database


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest_asyncio.fixture(loop_scope="function")
async def store(database: Database) -> IdentityStore:
    identities = IdentityStore(database)
    await identities.migrate()
    await identities.migrate()  # idempotent
    return identities


async def test_accounts(store: IdentityStore) -> None:
    first = await store.create_account("Acme")
    second = await store.create_account("Beta", plan="paid", account_id="beta")
    assert re.fullmatch(r"[0-9a-f]{32}", first.id)
    assert (first.plan, second.plan, second.id) == (Plan.FREE, Plan.PAID, "beta")
    assert await store.get_account(first.id) == first
    assert await store.get_account("nobody") is None
    assert {a.id for a in await store.list_accounts()} == {first.id, "beta"}
    with pytest.raises(AccountExists):
        await store.create_account("Again", account_id="beta")
    with pytest.raises(ValueError):
        await store.create_account("Bad plan", plan="gold")


async def test_account_settings(store: IdentityStore) -> None:
    account = await store.create_account("Acme")
    assert account.deny_patterns == () and account.free_neurons(10_000.0) == 10_000.0
    await store.set_deny_patterns(account.id, ["@cf/meta/*"])
    await store.set_daily_free_neurons(account.id, 500.0)
    await store.set_plan(account.id, Plan.PAID)
    changed = await store.get_account(account.id)
    assert changed is not None
    assert (changed.deny_patterns, changed.free_neurons(10_000.0), changed.plan) == (
        ("@cf/meta/*",),
        500.0,
        "paid",
    )
    with pytest.raises(UnknownAccount):
        await store.set_plan("nobody", Plan.FREE)


async def test_token_for_missing_account_is_refused(store: IdentityStore) -> None:
    with pytest.raises(UnknownAccount, match="nobody") as raised:
        await store.create_token("nobody", "ci")
    assert isinstance(raised.value, ValueError)
    assert await store.list_tokens() == []


async def test_create_list_and_authenticate(store: IdentityStore) -> None:
    account = await store.create_account("Acme")
    secret, info = await store.create_token(account.id, "laptop")
    assert re.fullmatch(re.escape(TOKEN_PREFIX) + r"[A-Za-z0-9_-]{40}", secret)
    assert re.fullmatch(r"[0-9a-f]{12}", info.id)
    assert await store.list_tokens() == [info]
    assert await store.list_tokens(account.id) == [info]
    assert await store.list_tokens("other") == []
    assert await store.get_token(info.id) == info
    assert await store.account_of(info.id) == account.id
    principal = await store.authenticate(secret)
    assert principal == Principal(
        account_id=account.id,
        token_id=info.id,
        token_name="laptop",
        model_patterns=("*",),
        permissions=frozenset({Permission.RUN, Permission.READ_USAGE}),
    )
    assert await store.authenticate(secret + "x") is None
    assert await store.authenticate("") is None


async def test_scopes_and_limits_reach_the_principal(database: Database) -> None:
    clock = Clock()
    store = IdentityStore(database, clock=clock)
    await store.migrate()
    account = await store.create_account("Acme")
    secret, info = await store.create_token(
        account.id,
        "batch",
        model_patterns=("@cf/meta/*", "@cf/google/gemma-*"),
        permissions=("run", Permission.ADMIN),
        expires_in_s=3600,
        requests_per_minute=60,
        tokens_per_minute=10_000,
        monthly_spend_limit_usd=12.5,
        collect_log=True,
    )
    principal = await store.authenticate(secret)
    assert principal == info.principal()
    assert principal == Principal(
        account_id=account.id,
        token_id=info.id,
        token_name="batch",
        model_patterns=("@cf/meta/*", "@cf/google/gemma-*"),
        permissions=frozenset({Permission.RUN, Permission.ADMIN}),
        requests_per_minute=60,
        tokens_per_minute=10_000,
        monthly_spend_limit_usd=12.5,
        collect_log=True,
        expires_at=clock.now + 3600,
    )
    assert principal.may_use("@cf/google/gemma-3-270m") and not principal.may_use("@cf/qwen/x")


async def test_revoked_and_expired_tokens_fail_alike(database: Database) -> None:
    clock = Clock()
    store = IdentityStore(database, clock=clock)
    await store.migrate()
    account = await store.create_account("Acme")
    revoked, revoked_info = await store.create_token(account.id, "revoked")
    expiring, _ = await store.create_token(account.id, "expiring", expires_in_s=60)
    assert await store.revoke_token(revoked_info.id) is True
    assert await store.revoke_token(revoked_info.id) is False
    assert await store.revoke_token("000000000000") is False
    assert await store.authenticate(revoked) is None
    assert await store.authenticate(expiring) is not None
    clock.now += 60
    assert await store.authenticate(expiring) is None
    listed = {t.name: t for t in await store.list_tokens()}
    assert listed["revoked"].revoked_at == clock.now - 60
    assert not listed["expiring"].usable(clock.now)


async def test_has_tokens_counts_only_usable_ones(database: Database) -> None:
    clock = Clock()
    store = IdentityStore(database, clock=clock)
    await store.migrate()
    assert await store.has_tokens() is False
    account = await store.create_account("Acme")
    await store.create_token(account.id, "short", expires_in_s=10)
    assert await store.has_tokens() is True
    clock.now += 10
    assert await store.has_tokens() is False
    _, forever = await store.create_token(account.id, "forever")
    assert await store.has_tokens() is True
    await store.revoke_token(forever.id)
    assert await store.has_tokens() is False


async def test_only_the_hash_is_stored(store: IdentityStore, database: Database) -> None:
    account = await store.create_account("Acme")
    secret, _ = await store.create_token(account.id, "laptop")
    rows = await database.fetch_all("SELECT * FROM api_tokens")
    cells = [str(cell) for row in rows for cell in row]
    assert hash_secret(secret) in cells
    assert not any(secret in cell or secret[len(TOKEN_PREFIX) :] in cell for cell in cells)
    assert "secret" not in json.dumps([t.to_json() for t in await store.list_tokens()])


async def test_invalid_limits_are_refused(store: IdentityStore) -> None:
    account = await store.create_account("Acme")
    for limits in ({"requests_per_minute": 0}, {"expires_in_s": -1}, {"monthly_spend_limit_usd": -0.01}):
        with pytest.raises(ValueError):
            await store.create_token(account.id, "bad", **limits)


class CountingStore:
    def __init__(self, answers: dict[str, Principal]) -> None:
        self.answers = answers
        self.lookups = 0

    async def authenticate(self, secret: str) -> Principal | None:
        self.lookups += 1
        return self.answers.get(secret)


PRINCIPAL = Principal(account_id="a", token_id="t", token_name="n")


async def test_cache_remembers_hits_and_misses_for_its_ttl() -> None:
    backing, clock = CountingStore({"good": PRINCIPAL}), Clock(0.0)
    cache = CachedAuthenticator(backing, ttl_s=2.0, clock=clock)
    assert await cache.authenticate("good") == PRINCIPAL
    assert await cache.authenticate("bad") is None
    clock.now = 1.9
    assert await cache.authenticate("good") == PRINCIPAL
    assert await cache.authenticate("bad") is None
    assert backing.lookups == 2
    backing.answers.pop("good")  # revoked
    clock.now = 2.0
    assert await cache.authenticate("good") is None
    assert backing.lookups == 3


async def test_cache_rechecks_expiry_on_every_hit() -> None:
    wall = Clock(100.0)
    expiring = Principal(account_id="a", token_id="t", token_name="n", expires_at=150.0)
    backing = CountingStore({"good": expiring})
    cache = CachedAuthenticator(backing, ttl_s=1000.0, clock=Clock(0.0), wall_clock=wall)
    assert await cache.authenticate("good") == expiring
    wall.now = 150.0
    assert await cache.authenticate("good") is None
    assert backing.lookups == 1


async def test_cache_with_zero_ttl_always_asks_and_is_bounded() -> None:
    backing = CountingStore({"good": PRINCIPAL})
    uncached = CachedAuthenticator(backing, ttl_s=0)
    for _ in range(3):
        assert await uncached.authenticate("good") == PRINCIPAL
    assert backing.lookups == 3
    bounded = CachedAuthenticator(backing, ttl_s=60, clock=Clock(0.0), max_entries=2)
    for secret in ("x", "y", "z", "good"):
        await bounded.authenticate(secret)
    assert backing.lookups == 7
    await bounded.authenticate("z")
    await bounded.authenticate("x")  # evicted as the oldest
    assert backing.lookups == 8


async def test_cache_in_front_of_the_store(store: IdentityStore) -> None:
    account = await store.create_account("Acme")
    secret, info = await store.create_token(account.id, "laptop")
    cache = CachedAuthenticator(store, ttl_s=60)
    assert await cache.authenticate(secret) == info.principal()
    await store.revoke_token(info.id)
    assert await cache.authenticate(secret) == info.principal()  # until the ttl runs out
    cache.clear()
    assert await cache.authenticate(secret) is None


def _cli(database: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="cirrus")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args([*argv, "--database", str(database)])
    code = int(args.handler(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "state" / "cirrus.db"
    code, out, _ = _cli(db, capsys, "accounts", "create", "Acme", "--plan", "paid", "--id", "acme", "--json")
    assert code == 0 and json.loads(out)["plan"] == "paid"
    code, out, _ = _cli(db, capsys, "accounts", "list")
    assert code == 0 and "acme" in out and "Acme" in out

    argv = ["tokens", "create", "--account", "acme", "--name", "ci", "--models", "@cf/meta/*", "@cf/google/*"]
    argv += ["--permissions", "run,admin", "--expires-in", "30d", "--rpm", "60", "--tpm", "1000"]
    code, out, _ = _cli(db, capsys, *argv, "--monthly-limit-usd", "5", "--collect-log")
    assert code == 0 and "will not be shown again" in out
    secret = re.search(r"cirrus_[A-Za-z0-9_-]{40}", out)
    token_id = re.search(r"token id: ([0-9a-f]{12})", out)
    assert secret and token_id

    code, out, _ = _cli(db, capsys, "tokens", "list", "--account", "acme", "--json")
    (listed,) = json.loads(out)
    assert secret.group(0) not in out
    assert listed["id"] == token_id.group(1)
    assert listed["model_patterns"] == ["@cf/meta/*", "@cf/google/*"]
    assert listed["permissions"] == ["admin", "run"]
    assert (listed["requests_per_minute"], listed["tokens_per_minute"]) == (60, 1000)
    assert listed["monthly_spend_limit_usd"] == 5.0 and listed["collect_log"] is True
    assert listed["expires_at"] - listed["created_at"] == pytest.approx(30 * 86400)

    code, out, _ = _cli(db, capsys, "tokens", "revoke", token_id.group(1))
    assert code == 0 and "revoked" in out
    assert _cli(db, capsys, "tokens", "revoke", token_id.group(1))[0] == 1
    code, out, _ = _cli(db, capsys, "tokens", "list")
    assert code == 0 and "revoked" in out


def test_cli_reports_a_missing_account(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _cli(
        tmp_path / "cirrus.db", capsys, "tokens", "create", "--account", "nobody", "--name", "x"
    )
    assert code == 1 and "no account" in err


def test_cli_sets_an_accounts_plan_allocation_and_deny_patterns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "cirrus.db"
    assert _cli(db, capsys, "accounts", "create", "Acme", "--id", "acme")[0] == 0
    argv = ["accounts", "set", "acme", "--plan", "paid", "--daily-free-neurons", "500"]
    code, out, _ = _cli(db, capsys, *argv, "--deny-pattern", r"forbidden\s+fruit", "--json")
    assert code == 0
    assert json.loads(out) | {"created_at": 0} == {
        "id": "acme",
        "name": "Acme",
        "plan": "paid",
        "daily_free_neurons": 500.0,
        "deny_patterns": [r"forbidden\s+fruit"],
        "created_at": 0,
    }
    argv = ["accounts", "set", "acme", "--deny-pattern", "secret", "--deny-pattern", r"forbidden\s+fruit"]
    code, out, _ = _cli(db, capsys, *argv)
    assert code == 0 and "daily free neurons: 500" in out
    assert re.findall(r"deny pattern: +(\S+)", out) == [r"forbidden\s+fruit", "secret"]  # added, once each
    argv = ["accounts", "set", "acme", "--clear-deny-patterns", "--default-daily-free-neurons", "--json"]
    code, out, _ = _cli(db, capsys, *argv, "--plan", "free")
    settings = json.loads(out)
    assert code == 0 and (settings["plan"], settings["daily_free_neurons"], settings["deny_patterns"]) == (
        "free",
        None,
        [],
    )
    code, out, _ = _cli(
        db, capsys, "accounts", "set", "acme", "--clear-deny-patterns", "--deny-pattern", "x+"
    )
    assert code == 0 and "deny pattern:       x+" in out and "daily free neurons: default" in out


def test_cli_refuses_bad_account_settings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "cirrus.db"
    assert _cli(db, capsys, "accounts", "create", "Acme", "--id", "acme")[0] == 0
    argv = ["accounts", "set", "acme", "--plan", "paid", "--deny-pattern", "fine"]
    code, out, err = _cli(db, capsys, *argv, "--deny-pattern", "(unclosed")
    assert (code, out) == (1, "") and "invalid deny pattern '(unclosed'" in err
    code, _, err = _cli(db, capsys, "accounts", "set", "acme", "--deny-pattern", "a*")
    assert code == 1 and "'a*'" in err and "empty string" in err
    code, _, err = _cli(db, capsys, "accounts", "set", "acme")
    assert code == 1 and "nothing to set" in err
    code, _, err = _cli(db, capsys, "accounts", "set", "nobody", "--plan", "paid")
    assert code == 1 and "no account with id 'nobody'" in err
    code, out, _ = _cli(db, capsys, "accounts", "list", "--json")
    (unchanged,) = json.loads(out)
    assert (unchanged["plan"], unchanged["deny_patterns"]) == ("free", [])  # nothing was half applied
    for bad in (["--daily-free-neurons", "-1"], ["--daily-free-neurons", "nan"], ["--plan", "gold"]):
        with pytest.raises(SystemExit):
            _cli(db, capsys, "accounts", "set", "acme", *bad)
    with pytest.raises(SystemExit):
        _cli(
            db, capsys, "accounts", "set", "acme", "--daily-free-neurons", "5", "--default-daily-free-neurons"
        )


def test_durations() -> None:
    assert [parse_duration(d) for d in ("30d", "12h", "15m", "3600s", "90")] == [
        2592000,
        43200,
        900,
        3600,
        90,
    ]
    for bad in ("", "0s", "10w", "-5m", "h"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_duration(bad)
