"""Budget checks before inference: a free account's daily neuron allocation, and a token's monthly spend limit.

Usage counts what the store holds (cached up to `cache_ttl_s`, see totals.py) plus what this process metered
but has not written yet, so a burst from one gateway is stopped at once, and usage through other gateways is
seen about a second late. A paid account is never refused for neurons: what it uses beyond its allocation is
billable (see `neurons.billable_neurons`).
"""

import time
from collections.abc import Callable
from typing import Protocol

from cirrus.auth.principal import Principal
from cirrus.errors import DailyAllocationExhausted, SpendLimitReached
from cirrus.metering.alerts import BudgetAlerts, BudgetUse
from cirrus.metering.meter import Meter
from cirrus.metering.neurons import format_usd
from cirrus.metering.periods import seconds_to_next_day, seconds_to_next_month, utc_day, utc_month
from cirrus.metering.totals import CachedTotals

FREE_PLAN = "free"


class UsageTotals(Protocol):
    async def neurons_today(self, account_id: str, day: str) -> float: ...

    async def spend_this_month(self, token_id: str, month: str) -> float: ...


class BudgetGuard:
    def __init__(
        self,
        store: UsageTotals,
        meter: Meter,
        default_daily_neurons: float,
        alerts: BudgetAlerts | None = None,
        *,
        clock: Callable[[], float] = time.time,
        cache_ttl_s: float = 1.0,
    ) -> None:
        self._store = store
        self._meter = meter
        self._default_daily_neurons = default_daily_neurons
        self._alerts = alerts
        self._clock = clock
        self._totals = CachedTotals(cache_ttl_s, clock)

    async def check(self, principal: Principal, plan: str, daily_free_neurons: float | None) -> None:
        """Raise if this request may not run; `daily_free_neurons` None means the default allocation."""
        now = self._clock()
        allocation = self._default_daily_neurons if daily_free_neurons is None else daily_free_neurons
        await self._check_daily(principal.account_id, plan, allocation, now)
        if principal.token_id is not None and principal.monthly_spend_limit_usd is not None:
            await self._check_spend(principal, principal.token_id, principal.monthly_spend_limit_usd, now)

    async def neurons_used(self, account_id: str, day: str) -> float:
        key = (account_id, day)
        version = self._meter.neurons.version(key)
        stored = await self._totals.get(
            ("neurons", account_id, day), version, lambda: self._store.neurons_today(account_id, day)
        )
        return stored + self._meter.neurons.pending(key)

    async def spend_used(self, token_id: str, month: str) -> float:
        key = (token_id, month)
        version = self._meter.spend.version(key)
        stored = await self._totals.get(
            ("spend", token_id, month), version, lambda: self._store.spend_this_month(token_id, month)
        )
        return stored + self._meter.spend.pending(key)

    async def _check_daily(self, account_id: str, plan: str, allocation: float, now: float) -> None:
        day = utc_day(now)
        used = await self.neurons_used(account_id, day)
        self._observe(BudgetUse("daily_neurons", account_id, day, used, allocation, account_id))
        if plan == FREE_PLAN and used >= allocation:
            raise DailyAllocationExhausted(
                f"You have used up your daily free allocation of {allocation:,.0f} neurons. Please upgrade to "
                "a paid plan if you would like to continue usage; the allocation resets at 00:00 UTC.",
                retry_after_s=seconds_to_next_day(now),
            )

    async def _check_spend(self, principal: Principal, token_id: str, limit: float, now: float) -> None:
        month = utc_month(now)
        used = await self.spend_used(token_id, month)
        self._observe(
            BudgetUse("monthly_spend", token_id, month, used, limit, principal.account_id, token_id)
        )
        if used >= limit:
            raise SpendLimitReached(
                f"This token has reached its monthly spend limit of {format_usd(limit)}; "
                "the limit resets on the 1st of next month at 00:00 UTC.",
                retry_after_s=seconds_to_next_month(now),
            )

    def _observe(self, use: BudgetUse) -> None:
        if self._alerts is not None:
            self._alerts.observe(use)
