"""Everything the gateway pipeline uses, opened once per node: the database, identities, limits, metering,
budgets, the response cache and metrics; plus the small per-model and per-account lookups it caches."""

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from cirrus.auth import Principal
from cirrus.auth.cache import CachedAuthenticator
from cirrus.auth.store import Account, IdentityStore
from cirrus.batches import BatchStore
from cirrus.cache import DatabaseResponseStore, RedisResponseStore, ResponseCache, ResponseStore
from cirrus.catalog import Catalog, ModelSpec
from cirrus.config import Settings
from cirrus.db import Database, DatabaseLimits, open_database
from cirrus.errors import DependencyUnavailable
from cirrus.files import FileStore
from cirrus.finetunes import FinetuneStore
from cirrus.gateway.open_mode import is_loopback
from cirrus.guardrails import InputGuard, OutputFilter
from cirrus.metering.alerts import BudgetAlerts
from cirrus.metering.budgets import BudgetGuard
from cirrus.metering.meter import Meter
from cirrus.metering.reservations import Reservations
from cirrus.metering.retention import UsageRetention
from cirrus.metering.shared_holds import SharedHolds
from cirrus.metering.store import UsageStore
from cirrus.observability.metrics import Metrics
from cirrus.rag.opening import VectorExtensionMissing
from cirrus.rag.store import RagStore
from cirrus.ratelimit import RateLimiter
from cirrus.resilience.shared_redis import SharedRedis
from cirrus.responses import StoredResponses
from cirrus.service import Backend

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

    def last(self, key: str) -> tuple[bool, object]:
        """The last answer however old: what stands in while the source is unavailable."""
        entry = self._entries.get(key)
        return (False, None) if entry is None else (True, entry[1])

    def put(self, key: str, value: object) -> None:
        if len(self._entries) > 10_000:
            self._entries.clear()
        self._entries[key] = (self.clock(), value)

    async def get_or_load(self, key: str, load: Callable[[], Awaitable[object]]) -> object:
        """The fresh answer, else `load()`'s; while the source is unavailable, the last answer however old.
        Never answered before: the source's DependencyUnavailable stands."""
        known, value = self.get(key)
        if known:
            return value
        try:
            value = await load()
        except DependencyUnavailable:
            known, value = self.last(key)
            if not known:
                raise
            return value
        self.put(key, value)
        return value


class NodeAuthenticator:
    """Tokens checked through a short-lived cache; whether any token exists (open mode) likewise.

    While the database is unavailable, a token checked within `ttl_s + stale_if_error_s` keeps its answer and any
    other is refused with 503 (see auth/cache.py); open mode keeps its last answer, and a node that never had one
    refuses with 503 rather than guess open.
    """

    def __init__(
        self, identity: IdentityStore, ttl_s: float, open_allowed: bool, stale_if_error_s: float = 0.0
    ) -> None:
        self._identity = identity
        self._tokens = CachedAuthenticator(identity, ttl_s, stale_if_error_s=stale_if_error_s)
        self._has_tokens = TimedLookup(ttl_s)
        self._open_allowed = open_allowed
        self._token_created = False

    async def authenticate(self, secret: str) -> Principal | None:
        return await self._tokens.authenticate(secret)

    def forget_tokens(self) -> None:
        """After this gateway revoked a token itself: its next use is checked in the store, not the cache.
        Other gateways still trust their cached answer for up to `ttl_s`."""
        self._tokens.clear()

    async def requires_token(self) -> bool:
        """False only on a node allowed to run open (loopback, or --allow-open) where no token was ever created:
        revoking or outliving the last token refuses everyone rather than open the node. So once a token was
        seen the answer is final, and only "none yet" is asked again."""
        if not self._open_allowed or self._token_created:
            return True
        self._token_created = bool(
            await self._has_tokens.get_or_load("any", self._identity.any_token_created)
        )
        return self._token_created


@dataclass
class GatewayParts:
    settings: Settings
    catalog: Catalog
    service: Backend
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
    responses: StoredResponses
    batches: BatchStore
    files: FileStore
    finetunes: FinetuneStore
    # AI Search: instances, items and ingest claims, `rag.index` the chunks; None on a PostgreSQL without pgvector
    rag: RagStore | None
    _accounts: TimedLookup
    _input_guards: dict[tuple[str, tuple[str, ...]], InputGuard] = field(default_factory=dict)
    _output_filters: dict[str, OutputFilter | None] = field(default_factory=dict)
    _purger: asyncio.Task[None] | None = None
    _retention: UsageRetention | None = None
    _redis: SharedRedis | None = None
    _holds: SharedHolds | None = None

    @classmethod
    async def open(
        cls, settings: Settings, catalog: Catalog, service: Backend, metrics: Metrics
    ) -> "GatewayParts":
        db = await open_database(settings.database_url(), database_limits(settings, metrics))
        identity = IdentityStore(db)
        await identity.migrate()
        usage_store = UsageStore(db)
        await usage_store.migrate()
        alerts = BudgetAlerts(db, settings.alert_webhook_url)
        await alerts.migrate()
        meter = Meter(
            usage_store,
            settings.state_dir / "usage-unwritten.jsonl",
            journal_dir=settings.state_dir / "usage-journal",
        )
        await meter.replay_unwritten()
        meter.start()
        redis = _shared_redis(settings, metrics)
        budgets, holds = await _budgets(db, usage_store, meter, settings, alerts)
        parts = cls(
            settings=settings,
            catalog=catalog,
            service=service,
            metrics=metrics,
            db=db,
            identity=identity,
            authenticator=NodeAuthenticator(
                identity,
                settings.auth_cache_ttl_s,
                is_loopback(settings.host) or settings.allow_open,
                settings.auth_stale_if_error_s,
            ),
            limiter=RateLimiter(redis or "memory://", on_charge_dropped=metrics.rate_limit_charge_dropped),
            usage_store=usage_store,
            meter=meter,
            alerts=alerts,
            budgets=budgets,
            cache=ResponseCache(await _response_store(db, redis), settings.cache_ttl_s),
            responses=await StoredResponses.open(db, settings.responses_retention_days * 86400),
            batches=await BatchStore.open(db),
            files=await FileStore.open(db),
            finetunes=await FinetuneStore.open(db, settings.finetune_max_per_account),
            rag=await _rag_store(db, settings),
            _accounts=TimedLookup(settings.auth_cache_ttl_s),
            _redis=redis,
            _holds=holds,
        )
        parts._purger = asyncio.create_task(parts._purge_cache_periodically())
        parts._retention = UsageRetention.started(db, settings)
        return parts

    async def close(self) -> None:
        if self._purger is not None:
            self._purger.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._purger
        if self._retention is not None:
            await self._retention.close()
        await self.meter.close()
        await self.alerts.close()
        await self.limiter.close()
        await self.cache.close()
        if self._redis is not None:
            await self._redis.close()
        if self._holds is not None:
            await self._holds.close()
        await self.db.close()

    async def account(self, account_id: str) -> Account | None:
        """Cached for the auth cache's TTL; while the database is unavailable, the last answer however old (an
        account's plan and allocation rarely change), and 503 for an account never looked up."""
        value = await self._accounts.get_or_load(account_id, lambda: self.identity.get_account(account_id))
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

    def chain(self, principal: Principal, spec: ModelSpec) -> list[ModelSpec]:
        """The model, then its fallbacks that this caller may use."""
        fallbacks = [self.catalog.get(model) for model in spec.fallbacks if principal.may_use(model)]
        return [spec, *fallbacks]

    async def _purge_cache_periodically(self) -> None:
        while True:
            await asyncio.sleep(CACHE_PURGE_INTERVAL_S)
            try:
                await self.cache.purge_expired()
                await self.responses.purge_expired()
                await self.files.purge_expired()
            except Exception:
                log.exception("could not purge expired cache entries, stored responses or files")


def database_limits(settings: Settings, metrics: Metrics | None = None) -> DatabaseLimits:
    return DatabaseLimits(
        timeout_s=settings.database_timeout_s,
        pool_size=settings.database_pool_size,
        retry_after_s=settings.database_retry_after_s,
        on_change=None if metrics is None else metrics.breaker_changed,
    )


def _shared_redis(settings: Settings, metrics: Metrics) -> SharedRedis | None:
    """One Redis client, deadline and breaker for the rate limits and the response cache: what one learns about
    an outage, the other does not pay for again."""
    if not settings.redis_url:
        return None
    return SharedRedis(
        settings.redis_url,
        timeout_s=settings.redis_timeout_s,
        probe_after_s=settings.redis_probe_after_s,
        on_change=metrics.breaker_changed,
    )


async def _response_store(db: Database, redis: SharedRedis | None) -> ResponseStore:
    if redis is not None:
        return RedisResponseStore(redis)
    return await DatabaseResponseStore.open(db)


async def _budgets(
    db: Database, usage: UsageStore, meter: Meter, settings: Settings, alerts: BudgetAlerts
) -> tuple[BudgetGuard, SharedHolds | None]:
    """Budgets with reservations. On PostgreSQL, which several gateways may share, each publishes what it
    reserves so the others count it too; a SQLite file serves one gateway, which needs no table for that."""
    reservations = Reservations()
    holds = None
    if db.dialect == "postgresql":
        holds = SharedHolds(db, reservations)
        await holds.migrate()
        holds.start()
    guard = BudgetGuard(
        usage, meter, settings.daily_free_neurons, alerts, reservations=reservations, shared=holds
    )
    return guard, holds


async def _rag_store(db: Database, settings: Settings) -> RagStore | None:
    """AI Search's store, or None where the database cannot hold its index: the gateway serves everything else."""
    try:
        return await RagStore.open(db, max_instances=settings.ai_search_max_instances)
    except VectorExtensionMissing as error:
        log.warning("AI Search is off: %s", error)
        return None
