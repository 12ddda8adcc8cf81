"""The Keys page's forms read into what the identity store takes, with the same rules as `cirrus tokens create`
and `cirrus accounts set`; a `FormError` names the field and what is wrong with it."""

import argparse
import math
from dataclasses import dataclass
from typing import Any

from cirrus.auth import Permission
from cirrus.auth.cli import parse_duration
from cirrus.auth.store import Plan
from cirrus.guardrails.patterns import compile_deny_patterns


class FormError(ValueError):
    pass


def _optional_int(fields: dict[str, str], name: str, label: str) -> int | None:
    text = fields.get(name, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) <= 0:
        raise FormError(f"{label} must be a whole number above 0, not {text!r}")
    return int(text)


def _optional_number(fields: dict[str, str], name: str, label: str) -> float | None:
    text = fields.get(name, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise FormError(f"{label} must be a number, 0 or more, not {text!r}")
    return value


def _checked(fields: dict[str, str], name: str) -> bool:
    return fields.get(name, "") in ("on", "true", "1")


@dataclass(frozen=True)
class NewToken:
    account_id: str
    name: str
    model_patterns: tuple[str, ...]
    permissions: tuple[Permission, ...]
    expires_in_s: float | None
    requests_per_minute: int | None
    tokens_per_minute: int | None
    monthly_spend_limit_usd: float | None
    collect_log: bool

    @classmethod
    def parse(cls, fields: dict[str, str]) -> "NewToken":
        name = fields.get("name", "").strip()
        if not name:
            raise FormError("a token needs a name")
        permissions = tuple(p for p in Permission if _checked(fields, f"perm_{p}"))
        if not permissions:
            raise FormError("a token needs at least one permission")
        return cls(
            account_id=fields.get("account", "").strip(),
            name=name,
            model_patterns=tuple(fields.get("models", "").replace(",", " ").split()) or ("*",),
            permissions=permissions,
            expires_in_s=_duration(fields.get("expires_in", "")),
            requests_per_minute=_optional_int(fields, "rpm", "Requests per minute"),
            tokens_per_minute=_optional_int(fields, "tpm", "Tokens per minute"),
            monthly_spend_limit_usd=_optional_number(fields, "monthly_limit_usd", "The monthly limit"),
            collect_log=_checked(fields, "collect_log"),
        )

    def store_arguments(self) -> dict[str, Any]:
        """Keyword arguments for IdentityStore.create_token."""
        return {
            "model_patterns": self.model_patterns,
            "permissions": self.permissions,
            "expires_in_s": self.expires_in_s,
            "requests_per_minute": self.requests_per_minute,
            "tokens_per_minute": self.tokens_per_minute,
            "monthly_spend_limit_usd": self.monthly_spend_limit_usd,
            "collect_log": self.collect_log,
        }


def _duration(text: str) -> float | None:
    if not text.strip():
        return None
    try:
        return parse_duration(text)
    except argparse.ArgumentTypeError as error:
        raise FormError(f"Expires in: {error}") from None


@dataclass(frozen=True)
class AccountSettings:
    plan: Plan
    daily_free_neurons: float | None  # None: the gateway's default
    deny_patterns: tuple[str, ...]

    @classmethod
    def parse(cls, fields: dict[str, str]) -> "AccountSettings":
        try:
            plan = Plan(fields.get("plan", ""))
        except ValueError:
            raise FormError("the plan is free or paid") from None
        patterns = tuple(
            dict.fromkeys(p.strip() for p in fields.get("deny_patterns", "").splitlines() if p.strip())
        )
        try:
            compile_deny_patterns(
                patterns
            )  # as the input guard will: refused whole, like `cirrus accounts set`
        except ValueError as error:
            raise FormError(str(error)) from None
        neurons = _optional_number(fields, "daily_free_neurons", "The daily free allocation")
        return cls(plan, neurons, patterns)


@dataclass(frozen=True)
class NewAccount:
    name: str
    plan: Plan
    account_id: str | None

    @classmethod
    def parse(cls, fields: dict[str, str]) -> "NewAccount":
        name = fields.get("name", "").strip()
        if not name:
            raise FormError("an account needs a name")
        try:
            plan = Plan(fields.get("plan", "free"))
        except ValueError:
            raise FormError("the plan is free or paid") from None
        return cls(name, plan, fields.get("account_id", "").strip() or None)
