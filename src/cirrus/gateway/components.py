"""Everything the gateway pipeline uses, opened once per node: the database, identities, limits, metering,
budgets, the response cache and metrics; plus the small per-model and per-account lookups it caches."""

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from cirrus.auth import Principal
from cirrus.auth.cache import CachedAuthenticator
from cirrus.auth.store import Account, IdentityStore
from cirrus.cache import DatabaseResponseStore, RedisResponseStore, ResponseCache, ResponseStore
from cirrus.catalog import Catalog, ModelSpec
from cirrus.config import Settings
from cirrus.db import Database, open_database
from cirrus.gateway.open_mode import is_loopback
from cirrus.guardrails import InputGuard, OutputFilter
from cirrus.metering.alerts import BudgetAlerts
from cirrus.metering.budgets import BudgetGuard
from cirrus.metering.meter import Meter
from cirrus.metering.store import UsageStore
from cirrus.observability.metrics import Metrics
from cirrus.ratelimit import RateLimiter
from cirrus.service import InferenceService

log = logging.getLogger(__name__)
CACHE_PURGE_INTERVAL_S = 600.0


@dataclass
class TimedLookup:
    """Remembers an async lookup's answers for `ttl_s` (0: always ask)."""

    ttl_s: float
    clock: Callable[[], float] = time.monotonic
    _entries: dict[str, tuple[float, object]] = field(default_factory=dict)

    def get(self, key: str) -> tuple[bool, object]:
        entry = self._entries.get(key)
        if entry is None or self.clock() - entry[0] >= self.ttl_s:
            return False, None
        return True, entry[1]

    def put(self, key: str, value: object) -> None:
        if len(self._entries) > 10_000:
            self._entries.clear()
        self._entries[key] = (self.clock(), value)


class NodeAuthenticator:
    """Tokens checked through a short-lived cache; whether any token exists (open mode) likewise."""

    def __init__(self, identity: IdentityStore, ttl_s: float, open_allowed: bool) -> None:
        self._identity = identity
        self._tokens = CachedAuthenticator(identity, ttl_s)
        self._has_tokens = TimedLookup(ttl_s)
        self._open_allowed = open_allowed

    async def authenticate(self, secret: str) -> Principal | None:
        return await self._tokens.authenticate(secret)

    async def requires_token(self) -> bool:
        """False only on a node allowed to run open (loopback, or --allow-open) where no token was ever created:
        revoking or outliving the last token refuses everyone rather than open the node."""
        if not self._open_allowed:
            return True
        known, value = self._has_tokens.get("any")
        if not known:
            value = await self._identity.any_token_created()
            self._has_tokens.put("any", value)
        return bool(value)


@dataclass
class GatewayParts:
    settings: Settings
    catalog: Catalog
    service: InferenceService
    metrics: Metrics
    db: Database
    identity: IdentityStore
    authenticator: NodeAuthenticator
    limiter: RateLimiter
    usage_store: UsageStore
    meter: Meter
    alerts: BudgetAlerts
    budgets: BudgetGuard
    cache: ResponseCache
    _accounts: TimedLookup
    _input_guards: dict[tuple[str, tuple[str, ...]], InputGuard] = field(default_factory=dict)
    _output_filters: dict[str, OutputFilter | None] = field(default_factory=dict)
    _purger: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls, settings: Settings, catalog: Catalog, service: InferenceService, metrics: Metrics
    ) -> "GatewayParts":
        db = await open_database(settings.database_url())
        identity = IdentityStore(db)
        await identity.migrate()
        usage_store = UsageStore(db)
        await usage_store.migrate()
        alerts = BudgetAlerts(db, settings.alert_webhook_url)
        await alerts.migrate()
        meter = Meter(usage_store, settings.state_dir / "usage-unwritten.jsonl")
        await meter.replay_unwritten()
        meter.start()
        parts = cls(
            settings=settings,
            catalog=catalog,
            service=service,
            metrics=metrics,
            db=db,
            identity=identity,
            authenticator=NodeAuthenticator(
                identity, settings.auth_cache_ttl_s, is_loopback(settings.host) or settings.allow_open
            ),
            limiter=RateLimiter(settings.redis_url or "memory://"),
            usage_store=usage_store,
            meter=meter,
            alerts=alerts,
            budgets=BudgetGuard(usage_store, meter, settings.daily_free_neurons, alerts),
            cache=ResponseCache(await _response_store(settings, db), settings.cache_ttl_s),
            _accounts=TimedLookup(settings.auth_cache_ttl_s),
        )
        parts._purger = asyncio.create_task(parts._purge_cache_periodically())
        return parts

    async def close(self) -> None:
        if self._purger is not None:
            self._purger.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._purger
        await self.meter.close()
        await self.alerts.close()
        await self.limiter.close()
        await self.cache.close()
        await self.db.close()

    async def account(self, account_id: str) -> Account | None:
        known, value = self._accounts.get(account_id)
        if not known:
            value = await self.identity.get_account(account_id)
            self._accounts.put(account_id, value)
        return value if isinstance(value, Account) else None

    async def input_guard(self, principal: Principal, spec: ModelSpec) -> InputGuard:
        account = await self.account(principal.account_id) if principal.token_id else None
        patterns = (*spec.deny_patterns, *(account.deny_patterns if account else ()))
        key = (spec.id, patterns)
        guard = self._input_guards.get(key)
        if guard is None:
            guard = self._input_guards[key] = InputGuard(self.settings.max_prompt_chars, patterns)
        return guard

    def output_filter(self, spec: ModelSpec) -> OutputFilter | None:
        if spec.id not in self._output_filters:
            built = OutputFilter(spec.output_filters, spec.output_deny_patterns)
            self._output_filters[spec.id] = built if built.enabled else None
        return self._output_filters[spec.id]

    async def check_budget(self, principal: Principal) -> None:
        """The open node (local development) has no budget; a token's account always exists."""
        if principal.token_id is None:
            return
        account = await self.account(principal.account_id)
        if account is None:
            return
        await self.budgets.check(principal, account.plan, account.daily_free_neurons)

    def chain(self, principal: Principal, spec: ModelSpec) -> list[ModelSpec]:
        """The model, then its fallbacks that this caller may use."""
        fallbacks = [self.catalog.get(model) for model in spec.fallbacks if principal.may_use(model)]
        return [spec, *fallbacks]

    async def _purge_cache_periodically(self) -> None:
        while True:
            await asyncio.sleep(CACHE_PURGE_INTERVAL_S)
            try:
                await self.cache.purge_expired()
            except Exception:
                log.exception("could not purge expired cache entries")


async def _response_store(settings: Settings, db: Database) -> ResponseStore:
    if settings.redis_url:
        return RedisResponseStore(settings.redis_url)
    return await DatabaseResponseStore.open(db)
