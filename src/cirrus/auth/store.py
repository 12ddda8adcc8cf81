"""Accounts and their API tokens, in the gateway's database.

Only a token's SHA-256 is stored; its secret is shown once, when it is created. Times are Unix seconds
(DOUBLE PRECISION), lists are JSON text and booleans are 0/1, so the same SQL runs on SQLite and PostgreSQL.
"""

import json
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from cirrus.auth.principal import Permission, Principal
from cirrus.auth.secrets import hash_secret, new_account_id, new_secret, new_token_id
from cirrus.db.database import Database, Row

MIGRATIONS = (
    """CREATE TABLE IF NOT EXISTS accounts (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        plan TEXT NOT NULL DEFAULT 'free' CHECK (plan IN ('free', 'paid')),
        daily_free_neurons DOUBLE PRECISION,
        deny_patterns TEXT NOT NULL DEFAULT '[]',
        created_at DOUBLE PRECISION NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS api_tokens (
        id TEXT PRIMARY KEY,
        account_id TEXT NOT NULL REFERENCES accounts (id),
        name TEXT NOT NULL,
        secret_sha256 TEXT NOT NULL UNIQUE,
        model_patterns TEXT NOT NULL,
        permissions TEXT NOT NULL,
        requests_per_minute BIGINT,
        tokens_per_minute BIGINT,
        monthly_spend_limit_usd DOUBLE PRECISION,
        collect_log BIGINT NOT NULL DEFAULT 0,
        created_at DOUBLE PRECISION NOT NULL,
        expires_at DOUBLE PRECISION,
        revoked_at DOUBLE PRECISION
    )""",
    "CREATE INDEX IF NOT EXISTS api_tokens_account_id ON api_tokens (account_id)",
)

_ACCOUNT_COLUMNS = "id, name, plan, daily_free_neurons, deny_patterns, created_at"
_TOKEN_COLUMNS = (
    "id, account_id, name, model_patterns, permissions, requests_per_minute, tokens_per_minute, "
    "monthly_spend_limit_usd, collect_log, created_at, expires_at, revoked_at"
)
_USABLE = "revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)"
_ACCOUNT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
DEFAULT_PERMISSIONS = (Permission.RUN, Permission.READ_USAGE)


class IdentityError(ValueError):
    pass


class UnknownAccount(IdentityError):
    def __init__(self, account_id: str) -> None:
        super().__init__(f"no account with id {account_id!r}")
        self.account_id = account_id


class AccountExists(IdentityError):
    def __init__(self, account_id: str) -> None:
        super().__init__(f"an account with id {account_id!r} already exists")
        self.account_id = account_id


class Plan(StrEnum):
    FREE = "free"
    PAID = "paid"


@dataclass(frozen=True)
class Account:
    id: str
    name: str
    plan: Plan
    daily_free_neurons: float | None  # None: the gateway's default allocation
    deny_patterns: tuple[str, ...]
    created_at: float

    def free_neurons(self, default: float) -> float:
        return default if self.daily_free_neurons is None else self.daily_free_neurons

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "plan": str(self.plan),
            "daily_free_neurons": self.daily_free_neurons,
            "deny_patterns": list(self.deny_patterns),
            "created_at": self.created_at,
        }


@dataclass(frozen=True)
class TokenInfo:
    """Everything about a token but its secret."""

    id: str
    account_id: str
    name: str
    model_patterns: tuple[str, ...]
    permissions: frozenset[Permission]
    requests_per_minute: int | None
    tokens_per_minute: int | None
    monthly_spend_limit_usd: float | None
    collect_log: bool
    created_at: float
    expires_at: float | None
    revoked_at: float | None

    def usable(self, now: float) -> bool:
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)

    def principal(self) -> Principal:
        return Principal(
            account_id=self.account_id,
            token_id=self.id,
            token_name=self.name,
            model_patterns=self.model_patterns,
            permissions=self.permissions,
            requests_per_minute=self.requests_per_minute,
            tokens_per_minute=self.tokens_per_minute,
            monthly_spend_limit_usd=self.monthly_spend_limit_usd,
            collect_log=self.collect_log,
            expires_at=self.expires_at,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "account_id": self.account_id,
            "name": self.name,
            "model_patterns": list(self.model_patterns),
            "permissions": sorted(self.permissions),
            "requests_per_minute": self.requests_per_minute,
            "tokens_per_minute": self.tokens_per_minute,
            "monthly_spend_limit_usd": self.monthly_spend_limit_usd,
            "collect_log": self.collect_log,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "revoked_at": self.revoked_at,
        }


def _account(row: Row) -> Account:
    id_, name, plan, neurons, deny, created_at = row
    return Account(id_, name, Plan(plan), neurons, tuple(json.loads(deny)), created_at)


def _token(row: Row) -> TokenInfo:
    id_, account_id, name, models, permissions, rpm, tpm, spend, collect_log, created, expires, revoked = row
    return TokenInfo(
        id=id_,
        account_id=account_id,
        name=name,
        model_patterns=tuple(json.loads(models)),
        permissions=frozenset(Permission(p) for p in json.loads(permissions)),
        requests_per_minute=rpm,
        tokens_per_minute=tpm,
        monthly_spend_limit_usd=spend,
        collect_log=bool(collect_log),
        created_at=created,
        expires_at=expires,
        revoked_at=revoked,
    )


def _check_positive(**limits: float | None) -> None:
    for name, value in limits.items():
        if value is not None and value <= 0:
            raise ValueError(f"{name} must be positive, not {value}")


class IdentityStore:
    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self._clock = clock

    async def migrate(self) -> None:
        await self._db.migrate(MIGRATIONS)

    # Accounts

    async def create_account(
        self, name: str, plan: Plan | str = Plan.FREE, account_id: str | None = None
    ) -> Account:
        account_id = account_id or new_account_id()
        if not _ACCOUNT_ID.fullmatch(account_id):
            raise IdentityError(f"an account id is 1-64 letters, digits, '.', '_' or '-', not {account_id!r}")
        if await self.get_account(account_id) is not None:
            raise AccountExists(account_id)
        account = Account(account_id, name, Plan(plan), None, (), self._clock())
        await self._db.execute(
            f"INSERT INTO accounts ({_ACCOUNT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
            (account.id, account.name, str(account.plan), None, "[]", account.created_at),
        )
        return account

    async def get_account(self, account_id: str) -> Account | None:
        row = await self._db.fetch_one(f"SELECT {_ACCOUNT_COLUMNS} FROM accounts WHERE id = ?", (account_id,))
        return None if row is None else _account(row)

    async def list_accounts(self) -> list[Account]:
        rows = await self._db.fetch_all(f"SELECT {_ACCOUNT_COLUMNS} FROM accounts ORDER BY created_at, id")
        return [_account(row) for row in rows]

    async def set_plan(self, account_id: str, plan: Plan | str) -> None:
        await self._update_account(account_id, "plan", str(Plan(plan)))

    async def set_daily_free_neurons(self, account_id: str, neurons: float | None) -> None:
        """An account's own daily free allocation; None returns it to the gateway's default."""
        await self._update_account(account_id, "daily_free_neurons", neurons)

    async def set_deny_patterns(self, account_id: str, patterns: Iterable[str]) -> None:
        """Regular expressions (case-insensitive) refused in the input of every request of this account.

        They are matched in the prompt and in each message's content, before inference; a match is 400 with
        code 3054.
        """
        await self._update_account(account_id, "deny_patterns", json.dumps(list(patterns)))

    async def _update_account(self, account_id: str, column: str, value: object) -> None:
        changed = await self._db.execute(
            f"UPDATE accounts SET {column} = ? WHERE id = ?", (value, account_id)
        )
        if changed == 0:
            raise UnknownAccount(account_id)

    # Tokens

    async def create_token(
        self,
        account_id: str,
        name: str,
        model_patterns: Sequence[str] = ("*",),
        permissions: Iterable[Permission | str] = DEFAULT_PERMISSIONS,
        expires_in_s: float | None = None,
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        monthly_spend_limit_usd: float | None = None,
        collect_log: bool = False,
    ) -> tuple[str, TokenInfo]:
        """Create a token; return its secret (never retrievable again) and its description."""
        _check_positive(
            expires_in_s=expires_in_s,
            requests_per_minute=requests_per_minute,
            tokens_per_minute=tokens_per_minute,
        )
        if monthly_spend_limit_usd is not None and monthly_spend_limit_usd < 0:
            raise ValueError(f"monthly_spend_limit_usd must not be negative, not {monthly_spend_limit_usd}")
        if await self.get_account(account_id) is None:
            raise UnknownAccount(account_id)
        now = self._clock()
        info = TokenInfo(
            id=new_token_id(),
            account_id=account_id,
            name=name,
            model_patterns=tuple(model_patterns),
            permissions=frozenset(Permission(p) for p in permissions),
            requests_per_minute=requests_per_minute,
            tokens_per_minute=tokens_per_minute,
            monthly_spend_limit_usd=monthly_spend_limit_usd,
            collect_log=collect_log,
            created_at=now,
            expires_at=None if expires_in_s is None else now + expires_in_s,
            revoked_at=None,
        )
        secret = new_secret()
        await self._insert_token(info, hash_secret(secret))
        return secret, info

    async def _insert_token(self, info: TokenInfo, secret_sha256: str) -> None:
        await self._db.execute(
            f"INSERT INTO api_tokens ({_TOKEN_COLUMNS}, secret_sha256) VALUES ({', '.join('?' * 13)})",
            (
                info.id,
                info.account_id,
                info.name,
                json.dumps(list(info.model_patterns)),
                json.dumps(sorted(info.permissions)),
                info.requests_per_minute,
                info.tokens_per_minute,
                info.monthly_spend_limit_usd,
                int(info.collect_log),
                info.created_at,
                info.expires_at,
                info.revoked_at,
                secret_sha256,
            ),
        )

    async def get_token(self, token_id: str) -> TokenInfo | None:
        row = await self._db.fetch_one(f"SELECT {_TOKEN_COLUMNS} FROM api_tokens WHERE id = ?", (token_id,))
        return None if row is None else _token(row)

    async def list_tokens(self, account_id: str | None = None) -> list[TokenInfo]:
        query = f"SELECT {_TOKEN_COLUMNS} FROM api_tokens"
        if account_id is None:
            rows = await self._db.fetch_all(f"{query} ORDER BY created_at, id")
        else:
            rows = await self._db.fetch_all(
                f"{query} WHERE account_id = ? ORDER BY created_at, id", (account_id,)
            )
        return [_token(row) for row in rows]

    async def account_of(self, token_id: str) -> str | None:
        row = await self._db.fetch_one("SELECT account_id FROM api_tokens WHERE id = ?", (token_id,))
        return None if row is None else str(row[0])

    async def revoke_token(self, token_id: str) -> bool:
        """Revoke a token for good; False when there is no such token or it was already revoked."""
        changed = await self._db.execute(
            "UPDATE api_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
            (self._clock(), token_id),
        )
        return changed > 0

    async def authenticate(self, secret: str) -> Principal | None:
        """The principal a secret proves; None alike for an unknown, revoked or expired token."""
        row = await self._db.fetch_one(
            f"SELECT {_TOKEN_COLUMNS} FROM api_tokens WHERE secret_sha256 = ? AND {_USABLE}",
            (hash_secret(secret), self._clock()),
        )
        return None if row is None else _token(row).principal()

    async def any_token_created(self) -> bool:
        """Whether a token was ever created here, usable or not: once one was, the node never runs open again."""
        return await self._db.fetch_one("SELECT 1 FROM api_tokens LIMIT 1") is not None

    async def has_tokens(self) -> bool:
        """Whether any token can still authenticate; with none, the gateway may run open."""
        row = await self._db.fetch_one(f"SELECT 1 FROM api_tokens WHERE {_USABLE} LIMIT 1", (self._clock(),))
        return row is not None
