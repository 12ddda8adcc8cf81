"""Budget checks before inference: a free account's daily neuron allocation, and a token's monthly spend limit.

Usage counts what the store holds (cached up to `cache_ttl_s`, see totals.py), what this process metered but
has not written yet, and what the requests it admitted and that still run may cost (their reservations, see
reservations.py), so a burst from one gateway is stopped at once, and usage through other gateways is seen
about a second late (with `shared`, their reservations too: see shared_holds.py). A request is admitted while that sum is below the limit, so a free account at its limit
overspends by at most one request's reservation. A paid account is never refused for neurons: what it uses
beyond its allocation is billable (see `neurons.billable_neurons`).
"""

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from cirrus.auth.principal import Principal
from cirrus.errors import DailyAllocationExhausted, SpendLimitReached
from cirrus.metering.alerts import BudgetAlerts, BudgetUse
from cirrus.metering.estimate import NOTHING, Estimate
from cirrus.metering.ledger import Key, Ledger
from cirrus.metering.meter import Meter
from cirrus.metering.neurons import format_usd
from cirrus.metering.periods import seconds_to_next_day, seconds_to_next_month, utc_day, utc_month
from cirrus.metering.reservations import Reservation, Reservations
from cirrus.metering.shared_holds import SharedHolds
from cirrus.metering.totals import CachedTotals

FREE_PLAN = "free"
REREADS = 3  # reads of one total while the meter keeps writing to it, before the last one stands


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
        reservations: Reservations | None = None,
        shared: SharedHolds | None = None,
    ) -> None:
        """`shared` (with the same `reservations`): count what other gateways on this database hold too."""
        self._store = store
        self._meter = meter
        self._default_daily_neurons = default_daily_neurons
        self._alerts = alerts
        self._clock = clock
        self._totals = CachedTotals(cache_ttl_s, clock)
        self.reservations = reservations if reservations is not None else Reservations()
        self._shared = shared

    async def check(self, principal: Principal, plan: str, daily_free_neurons: float | None) -> None:
        """Raise if this request may not run; `daily_free_neurons` None means the default allocation."""
        (await self.admit(principal, plan, daily_free_neurons, NOTHING)).release()

    async def admit(
        self, principal: Principal, plan: str, daily_free_neurons: float | None, estimate: Estimate
    ) -> Reservation:
        """Raise if this request may not run, else hold its estimated cost until the caller releases it."""
        now = self._clock()
        allocation = self._default_daily_neurons if daily_free_neurons is None else daily_free_neurons
        neurons_key = (principal.account_id, utc_day(now))
        limit = principal.monthly_spend_limit_usd
        spend_key = (
            None if principal.token_id is None or limit is None else (principal.token_id, utc_month(now))
        )
        neurons, spend = await self._used_now(neurons_key, spend_key)
        # Nothing awaits from here to the hold, so a concurrent admission sees this one's reservation.
        self._check_daily(principal.account_id, plan, allocation, neurons, neurons_key, now)
        if spend_key is not None and limit is not None:
            self._check_spend(principal, limit, spend, spend_key, now)
        return self.reservations.hold(neurons_key, spend_key, estimate)

    async def _used_now(self, neurons_key: Key, spend_key: Key | None) -> tuple[float, float]:
        """Both totals, stored plus pending. The pending parts are read after both stored reads, in the step
        that checks and holds: a request metered while either read was awaited is then in one or the other."""
        for _ in range(REREADS):
            versions = self._versions(neurons_key, spend_key)
            neurons, spend = await self._stored_now(neurons_key, spend_key)
            if self._versions(neurons_key, spend_key) == versions:
                break
        pending_spend = 0.0 if spend_key is None else self._meter.spend.pending(spend_key)
        return neurons + self._meter.neurons.pending(neurons_key), spend + pending_spend

    def _versions(self, neurons_key: Key, spend_key: Key | None) -> tuple[int, int]:
        spend = -1 if spend_key is None else self._meter.spend.version(spend_key)
        return self._meter.neurons.version(neurons_key), spend

    async def _stored_now(self, neurons_key: Key, spend_key: Key | None) -> tuple[float, float]:
        """Read together only when both are needed (tasks cost more than a cached total)."""
        neurons = self._stored("neurons", neurons_key, self._meter.neurons, self._store.neurons_today)
        if spend_key is None:
            return await neurons, 0.0
        spend = self._stored("spend", spend_key, self._meter.spend, self._store.spend_this_month)
        both = await asyncio.gather(neurons, spend)
        return both[0], both[1]

    async def neurons_used(self, account_id: str, day: str) -> float:
        """Stored and pending: what was metered, without this gateway's holds of requests still running (with
        `shared`, plus what the other gateways hold)."""
        return await self._used("neurons", (account_id, day), self._meter.neurons, self._store.neurons_today)

    async def spend_used(self, token_id: str, month: str) -> float:
        return await self._used("spend", (token_id, month), self._meter.spend, self._store.spend_this_month)

    async def _used(
        self, what: str, key: Key, ledger: Ledger, read: Callable[[str, str], Awaitable[float]]
    ) -> float:
        """Read again when the meter wrote to this key during the read: a batch it wrote and settled meanwhile
        would otherwise be neither in the total read nor still pending."""
        stored = 0.0
        for _ in range(REREADS):
            version = ledger.version(key)
            stored = await self._stored(what, key, ledger, read)
            if ledger.version(key) == version:
                break
        return stored + ledger.pending(key)

    async def _stored(
        self, what: str, key: Key, ledger: Ledger, read: Callable[[str, str], Awaitable[float]]
    ) -> float:
        """The stored total (cached while the meter has not written to this key), plus, with `shared`, what
        the other gateways hold."""
        subject, period = key

        async def stored_and_held_elsewhere() -> float:
            if self._shared is None:
                return await read(subject, period)
            stored, elsewhere = await asyncio.gather(
                read(subject, period), self._shared.held_elsewhere(what, subject, period)
            )
            return stored + elsewhere

        return await self._totals.get((what, subject, period), ledger.version(key), stored_and_held_elsewhere)

    def _check_daily(
        self, account_id: str, plan: str, allocation: float, used: float, key: Key, now: float
    ) -> None:
        self._observe(BudgetUse("daily_neurons", account_id, key[1], used, allocation, account_id))
        if plan == FREE_PLAN and used + self.reservations.neurons.held(key) >= allocation:
            raise DailyAllocationExhausted(
                f"You have used up your daily free allocation of {allocation:,.0f} neurons. Please upgrade to "
                "a paid plan if you would like to continue usage; the allocation resets at 00:00 UTC.",
                retry_after_s=seconds_to_next_day(now),
            )

    def _check_spend(self, principal: Principal, limit: float, used: float, key: Key, now: float) -> None:
        token_id, month = key
        self._observe(
            BudgetUse("monthly_spend", token_id, month, used, limit, principal.account_id, token_id)
        )
        if used + self.reservations.spend.held(key) >= limit:
            raise SpendLimitReached(
                f"This token has reached its monthly spend limit of {format_usd(limit)}; "
                "the limit resets on the 1st of next month at 00:00 UTC.",
                retry_after_s=seconds_to_next_month(now),
            )

    def _observe(self, use: BudgetUse) -> None:
        """Alerts count what was metered, not what running requests might still cost."""
        if self._alerts is not None:
            self._alerts.observe(use)
