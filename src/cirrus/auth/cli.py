"""`cirrus accounts ...` and `cirrus tokens ...`: manage identities straight in the gateway's database."""

import argparse
import asyncio
import datetime
import json
import math
import re
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias, TypeVar

from cirrus.auth.principal import Permission
from cirrus.auth.store import (
    DEFAULT_PERMISSIONS,
    Account,
    IdentityError,
    IdentityStore,
    Plan,
    TokenInfo,
    UnknownAccount,
)
from cirrus.config import Settings
from cirrus.db import open_database
from cirrus.guardrails.patterns import compile_deny_patterns

T = TypeVar("T")
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """`30d`, `12h`, `15m`, `3600s` or plain seconds."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (try 30d, 12h, 15m or 3600s)")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def parse_permissions(text: str) -> tuple[Permission, ...]:
    try:
        return tuple(Permission(p.strip()) for p in text.split(",") if p.strip())
    except ValueError:
        choices = ",".join(Permission)
        raise argparse.ArgumentTypeError(f"permissions are a comma-separated list of {choices}") from None


def parse_neurons(text: str) -> float:
    """A daily allocation of neurons: a finite number, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"not a number of neurons: {text!r} (a number, 0 or more)")
    return value


async def _with_store(args: argparse.Namespace, work: Callable[[IdentityStore], Awaitable[T]]) -> T:
    db = await open_database(args.database or Settings().database_url())
    try:
        store = IdentityStore(db)
        await store.migrate()
        return await work(store)
    finally:
        await db.close()


def _run(args: argparse.Namespace, work: Callable[[IdentityStore], Awaitable[T]]) -> T:
    return asyncio.run(_with_store(args, work))


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


def _when(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    return datetime.datetime.fromtimestamp(timestamp, datetime.UTC).strftime("%Y-%m-%d %H:%M")


def _print_account(account: Account) -> None:
    print(f"{account.id}  {account.plan:4}  {_when(account.created_at)}  {account.name}")


def _print_settings(account: Account) -> None:
    neurons = "default" if account.daily_free_neurons is None else f"{account.daily_free_neurons:g}"
    print(f"account {account.id} ({account.name})")
    print(f"  plan:               {account.plan}")
    print(f"  daily free neurons: {neurons}")
    if not account.deny_patterns:
        print("  deny patterns:      none")
    for pattern in account.deny_patterns:
        print(f"  deny pattern:       {pattern}")


def _token_state(token: TokenInfo) -> str:
    if token.revoked_at is not None:
        return "revoked"
    return "active" if token.expires_at is None else f"expires {_when(token.expires_at)}"


def _print_token(token: TokenInfo) -> None:
    permissions = ",".join(sorted(token.permissions))
    models = " ".join(token.model_patterns)
    print(
        f"{token.id}  {token.account_id}  {token.name:20} {permissions:24} {_token_state(token):24} {models}"
    )


def cmd_accounts_create(args: argparse.Namespace) -> int:
    try:
        account = _run(args, lambda store: store.create_account(args.name, args.plan, args.id))
    except IdentityError as exc:
        print(f"cirrus: {exc}", file=sys.stderr)
        return 1
    if args.json:
        _print_json(account.to_json())
    else:
        print(f"created account {account.id} ({account.name}, plan {account.plan})")
    return 0


def cmd_accounts_list(args: argparse.Namespace) -> int:
    accounts = _run(args, lambda store: store.list_accounts())
    if args.json:
        _print_json([account.to_json() for account in accounts])
        return 0
    print(f"{'ID':32}  PLAN  CREATED (UTC)     NAME")
    for account in accounts:
        _print_account(account)
    return 0


_NOTHING_TO_SET = (
    "nothing to set: give --plan, --daily-free-neurons, --default-daily-free-neurons, "
    "--deny-pattern or --clear-deny-patterns"
)


def _settings_error(args: argparse.Namespace) -> str | None:
    """Why these settings may not be applied, checked before the database is opened; None when they may."""
    neurons = args.daily_free_neurons is not None or args.default_daily_free_neurons
    deny = bool(args.deny_patterns) or args.clear_deny_patterns
    if args.plan is None and not neurons and not deny:
        return _NOTHING_TO_SET
    try:
        compile_deny_patterns(args.deny_patterns)  # as the input guard will: case-insensitive
    except ValueError as exc:
        return str(exc)
    return None


async def _apply_settings(store: IdentityStore, args: argparse.Namespace) -> Account:
    account = await store.get_account(args.account_id)
    if account is None:
        raise UnknownAccount(args.account_id)
    if args.plan is not None:
        await store.set_plan(account.id, args.plan)
    if args.daily_free_neurons is not None or args.default_daily_free_neurons:
        await store.set_daily_free_neurons(account.id, args.daily_free_neurons)
    if args.deny_patterns or args.clear_deny_patterns:
        kept = () if args.clear_deny_patterns else account.deny_patterns
        await store.set_deny_patterns(account.id, dict.fromkeys([*kept, *args.deny_patterns]))
    updated = await store.get_account(account.id)
    if updated is None:
        raise UnknownAccount(account.id)
    return updated


def cmd_accounts_set(args: argparse.Namespace) -> int:
    error = _settings_error(args)
    if error is not None:
        print(f"cirrus: {error}", file=sys.stderr)
        return 1
    try:
        account = _run(args, lambda store: _apply_settings(store, args))
    except IdentityError as exc:
        print(f"cirrus: {exc}", file=sys.stderr)
        return 1
    if args.json:
        _print_json(account.to_json())
    else:
        _print_settings(account)
    return 0


def cmd_tokens_create(args: argparse.Namespace) -> int:
    async def work(store: IdentityStore) -> tuple[str, TokenInfo]:
        return await store.create_token(
            args.account,
            args.name,
            model_patterns=args.models,
            permissions=args.permissions,
            expires_in_s=args.expires_in,
            requests_per_minute=args.rpm,
            tokens_per_minute=args.tpm,
            monthly_spend_limit_usd=args.monthly_limit_usd,
            collect_log=args.collect_log,
        )

    try:
        secret, token = _run(args, work)
    except ValueError as exc:  # an unknown account (IdentityError) or a limit out of range
        print(f"cirrus: {exc}", file=sys.stderr)
        return 1
    warning = "This secret will not be shown again: store it now."
    if args.json:
        _print_json({"secret": secret, **token.to_json()})
        print(warning, file=sys.stderr)
    else:
        print(f"token id: {token.id}")
        print(f"secret:   {secret}")
        print(warning)
    return 0


def cmd_tokens_list(args: argparse.Namespace) -> int:
    tokens = _run(args, lambda store: store.list_tokens(args.account))
    if args.json:
        _print_json([token.to_json() for token in tokens])
        return 0
    print(f"{'ID':12}  {'ACCOUNT':32}  {'NAME':20} {'PERMISSIONS':24} {'STATE':24} MODELS")
    for token in tokens:
        _print_token(token)
    return 0


def cmd_tokens_revoke(args: argparse.Namespace) -> int:
    revoked = _run(args, lambda store: store.revoke_token(args.token_id))
    if args.json:
        _print_json({"id": args.token_id, "revoked": revoked})
    elif revoked:
        print(f"revoked token {args.token_id}")
    else:
        print(f"cirrus: no active token with id {args.token_id}", file=sys.stderr)
    return 0 if revoked else 1


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--database", help="a SQLite file or a postgresql:// DSN (default: from settings)")
    common.add_argument("--json", action="store_true", help="print JSON for machines")
    return common


def _register_accounts(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    accounts = commands.add_parser("accounts", help="manage accounts")
    actions = accounts.add_subparsers(dest="accounts_command", required=True)
    create = actions.add_parser("create", parents=[common], help="create an account")
    create.add_argument("name")
    create.add_argument("--plan", choices=[str(p) for p in Plan], default=str(Plan.FREE))
    create.add_argument("--id", help="the account id (default: 32 random hex characters)")
    create.set_defaults(handler=cmd_accounts_create)
    listing = actions.add_parser("list", parents=[common], help="list accounts")
    listing.set_defaults(handler=cmd_accounts_list)
    _register_accounts_set(actions, common)


def _register_accounts_set(actions: Subparsers, common: argparse.ArgumentParser) -> None:
    update = actions.add_parser(
        "set", parents=[common], help="change an account's plan, allocation or deny patterns"
    )
    update.add_argument("account_id", metavar="ACCOUNT_ID")
    update.add_argument("--plan", choices=[str(p) for p in Plan], help="free accounts stop at the allocation")
    neurons = update.add_mutually_exclusive_group()
    neurons.add_argument(
        "--daily-free-neurons",
        dest="daily_free_neurons",
        type=parse_neurons,
        metavar="N",
        help="the account's own daily free allocation",
    )
    neurons.add_argument(
        "--default-daily-free-neurons",
        dest="default_daily_free_neurons",
        action="store_true",
        help="back to the gateway's default allocation",
    )
    update.add_argument(
        "--deny-pattern",
        dest="deny_patterns",
        action="append",
        default=[],
        metavar="REGEX",
        help="add a regular expression (case-insensitive) refused in the account's input; repeatable",
    )
    update.add_argument(
        "--clear-deny-patterns",
        dest="clear_deny_patterns",
        action="store_true",
        help="drop the account's deny patterns first",
    )
    update.set_defaults(handler=cmd_accounts_set)


def _register_tokens(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    tokens = commands.add_parser("tokens", help="manage API tokens")
    actions = tokens.add_subparsers(dest="tokens_command", required=True)
    create = actions.add_parser("create", parents=[common], help="create a token and print its secret once")
    create.add_argument("--account", required=True, help="the account id")
    create.add_argument("--name", required=True)
    create.add_argument("--models", nargs="+", default=["*"], metavar="GLOB", help="model ids it may run")
    create.add_argument(
        "--permissions", type=parse_permissions, default=DEFAULT_PERMISSIONS, help="e.g. run,read_usage,admin"
    )
    create.add_argument("--expires-in", dest="expires_in", type=parse_duration, help="e.g. 30d, 12h, 3600s")
    create.add_argument("--rpm", type=int, help="requests per minute")
    create.add_argument("--tpm", type=int, help="tokens per minute")
    create.add_argument("--monthly-limit-usd", dest="monthly_limit_usd", type=float)
    create.add_argument("--collect-log", dest="collect_log", action="store_true", help="keep request logs")
    create.set_defaults(handler=cmd_tokens_create)
    listing = actions.add_parser("list", parents=[common], help="list tokens (never their secrets)")
    listing.add_argument("--account", help="only this account's tokens")
    listing.set_defaults(handler=cmd_tokens_list)
    revoke = actions.add_parser("revoke", parents=[common], help="revoke a token")
    revoke.add_argument("token_id")
    revoke.set_defaults(handler=cmd_tokens_revoke)


def register(subparsers: Subparsers) -> None:
    """Add `accounts` and `tokens` to the `cirrus` command's subcommands."""
    common = _common()
    _register_accounts(subparsers, common)
    _register_tokens(subparsers, common)
