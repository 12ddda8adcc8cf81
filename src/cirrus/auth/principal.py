"""The principal a request acts as: an account, and the token (with its scopes and limits) that proved it."""

from dataclasses import dataclass, field
from enum import StrEnum
from fnmatch import fnmatchcase


class Permission(StrEnum):
    RUN = "run"
    READ_USAGE = "read_usage"
    ADMIN = "admin"


@dataclass(frozen=True)
class Principal:
    account_id: str
    token_id: str | None
    token_name: str
    model_patterns: tuple[str, ...] = ("*",)
    permissions: frozenset[Permission] = field(default_factory=lambda: frozenset(Permission))
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    monthly_spend_limit_usd: float | None = None
    collect_log: bool = False
    expires_at: float | None = None

    def can(self, permission: Permission) -> bool:
        return permission in self.permissions

    def may_use(self, model_id: str) -> bool:
        return any(fnmatchcase(model_id, pattern) for pattern in self.model_patterns)

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    @property
    def limit_key(self) -> str:
        """What rate limits and budgets are counted against: the token, or the account when open."""
        return self.token_id or f"account:{self.account_id}"


OPEN_ACCOUNT = "local"
# Local development with no tokens configured: one account, every permission.
OPEN_PRINCIPAL = Principal(account_id=OPEN_ACCOUNT, token_id=None, token_name="open")
