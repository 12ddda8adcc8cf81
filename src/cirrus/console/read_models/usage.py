"""The Usage page's figures: one account's usage per day, model and token over a period, the series a chart
stacked by model draws, and where the account stands against its daily allocation and its tokens against their
monthly limits. Every figure is summed by the database (`usage_daily`, kept by a trigger), never in Python over
usage records."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta

from cirrus.auth.store import IdentityStore, TokenInfo
from cirrus.metering.periods import is_day, utc_day, utc_month
from cirrus.metering.store import ModelDay, UsageRow, UsageStore

DEFAULT_DAYS = 30
MAX_DAYS = 366


class FilterError(ValueError):
    """A query parameter the page cannot use; its message says which and why."""


@dataclass(frozen=True)
class UsageFilters:
    """`since` and `until` are UTC days, both included; `token_id` "" means requests made without a token."""

    account_id: str
    since: str
    until: str
    model: str | None = None
    token_id: str | None = None

    @classmethod
    def parse(cls, account_id: str, params: Mapping[str, str], now: float) -> "UsageFilters":
        until = params.get("until") or utc_day(now)
        _check_day("until", until)
        since = (
            params.get("since") or (date.fromisoformat(until) - timedelta(days=DEFAULT_DAYS - 1)).isoformat()
        )
        _check_day("since", since)
        if since > until:
            raise FilterError("'since' must not be after 'until'")
        if (date.fromisoformat(until) - date.fromisoformat(since)).days >= MAX_DAYS:
            raise FilterError(f"a period is at most {MAX_DAYS} days")
        return cls(account_id, since, until, params.get("model") or None, params.get("token") or None)

    def query(self) -> dict[str, str]:
        """The filters as query parameters, for links (the CSV export) that keep them."""
        values = {"account": self.account_id, "since": self.since, "until": self.until}
        values.update({k: v for k, v in (("model", self.model), ("token", self.token_id)) if v})
        return values


@dataclass(frozen=True)
class Totals:
    requests: int = 0
    errors: int = 0
    neurons: float = 0.0
    cost_usd: float = 0.0


@dataclass(frozen=True)
class Gauge:
    label: str
    used: float
    limit: float
    unit: str  # "neurons" or "USD"

    @property
    def share(self) -> float:
        return self.used / self.limit if self.limit > 0 else 0.0


@dataclass(frozen=True)
class UsageReport:
    filters: UsageFilters
    days: list[str]  # every day of the period, used or not, so a chart's axis has no gaps
    rows: list[UsageRow]  # per day, model and token
    requests_by_model: dict[str, list[float]]  # model -> requests on each of `days`, largest model first
    neurons_by_model: dict[str, list[float]]
    totals: Totals
    allocation: Gauge  # today's neurons against the account's daily free allocation
    token_limits: list[Gauge]  # this month's spend of each token that has a monthly limit
    tokens: list[TokenInfo] = field(default_factory=list)  # the account's tokens, for names and the filter


def period_days(since: str, until: str) -> list[str]:
    first, last = date.fromisoformat(since), date.fromisoformat(until)
    return [(first + timedelta(days=n)).isoformat() for n in range((last - first).days + 1)]


def by_model(days: list[str], model_days: list[ModelDay], value: str) -> dict[str, list[float]]:
    """Each model's `value` (a ModelDay field) per day, 0 where it had none; the largest total first."""
    index = {day: i for i, day in enumerate(days)}
    series: dict[str, list[float]] = {}
    for entry in model_days:
        values = series.setdefault(entry.model, [0.0] * len(days))
        if entry.day in index:
            values[index[entry.day]] += float(getattr(entry, value))
    return dict(sorted(series.items(), key=lambda item: (-sum(item[1]), item[0])))


def totals_of(model_days: list[ModelDay]) -> Totals:
    return Totals(
        requests=sum(d.requests for d in model_days),
        errors=sum(d.errors for d in model_days),
        neurons=sum(d.neurons for d in model_days),
        cost_usd=sum(d.cost_usd for d in model_days),
    )


class UsageReader:
    def __init__(self, usage: UsageStore, identity: IdentityStore, default_free_neurons: float) -> None:
        self._usage = usage
        self._identity = identity
        self._default_free_neurons = default_free_neurons

    async def rows(self, filters: UsageFilters) -> list[UsageRow]:
        return await self._usage.usage(
            filters.account_id,
            token_id=filters.token_id,
            model=filters.model,
            since_day=filters.since,
            until_day=filters.until,
        )

    async def report(self, filters: UsageFilters, now: float) -> UsageReport:
        model_days = await self._usage.model_days(
            filters.account_id,
            token_id=filters.token_id,
            model=filters.model,
            since_day=filters.since,
            until_day=filters.until,
        )
        days = period_days(filters.since, filters.until)
        tokens = await self._identity.list_tokens(filters.account_id)
        return UsageReport(
            filters=filters,
            days=days,
            rows=await self.rows(filters),
            requests_by_model=by_model(days, model_days, "requests"),
            neurons_by_model=by_model(days, model_days, "neurons"),
            totals=totals_of(model_days),
            allocation=await self._allocation(filters.account_id, now),
            token_limits=await self._token_limits(filters.account_id, tokens, now),
            tokens=tokens,
        )

    async def _allocation(self, account_id: str, now: float) -> Gauge:
        account = await self._identity.get_account(account_id)
        default = self._default_free_neurons
        free = default if account is None else account.free_neurons(default)
        used = await self._usage.neurons_today(account_id, utc_day(now))
        return Gauge(f"Neurons used today ({utc_day(now)} UTC)", used, free, "neurons")

    async def _token_limits(self, account_id: str, tokens: list[TokenInfo], now: float) -> list[Gauge]:
        limited = [t for t in tokens if t.monthly_spend_limit_usd is not None and t.usable(now)]
        if not limited:
            return []
        month = utc_month(now)
        spend = await self._usage.spend_by_token(account_id, month)
        return [
            Gauge(
                f"{t.name} ({t.id}), {month}", spend.get(t.id, 0.0), t.monthly_spend_limit_usd or 0.0, "USD"
            )
            for t in limited
        ]


def _check_day(name: str, value: str) -> None:
    if not is_day(value):
        raise FilterError(f"'{name}' must be a date as YYYY-MM-DD, not {value!r}")
