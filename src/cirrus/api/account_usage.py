"""GET the caller's usage: rows per day, model and token, and each day's neurons beyond the free allocation."""

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from cirrus.api.context import platform_of, principal_of
from cirrus.api.workers_ai.schemas import envelope
from cirrus.auth import Permission, Principal
from cirrus.errors import Forbidden, InvalidInput
from cirrus.metering.neurons import billable_neurons
from cirrus.metering.periods import is_day
from cirrus.metering.store import UsageDay, UsageRow

router = APIRouter(tags=["Usage"])


@dataclass
class UsageQuery:
    """The query parameters; `since` and `until` are UTC days, both included."""

    token_id: str | None = None
    model: str | None = None
    since: str | None = None
    until: str | None = None

    def __post_init__(self) -> None:
        for name in ("since", "until"):
            value = getattr(self, name)
            if value is not None and not is_day(value):
                raise InvalidInput(f"'{name}' must be a date as YYYY-MM-DD, not {value!r}", param=name)
        if self.since and self.until and self.since > self.until:
            raise InvalidInput("'since' must not be after 'until'", param="since")


Query = Annotated[UsageQuery, Depends()]


@router.get("/client/v4/accounts/{account_id}/ai/usage", summary="An account's usage")
async def account_usage(account_id: str, query: Query, request: Request) -> dict[str, Any]:
    principal = _reader(request)
    if account_id != principal.account_id:
        raise Forbidden("this token may not read the usage of another account")
    return await _usage(request, principal.account_id, query)


@router.get("/usage", summary="The caller's usage")
async def own_usage(query: Query, request: Request) -> dict[str, Any]:
    return await _usage(request, _reader(request).account_id, query)


def _reader(request: Request) -> Principal:
    principal = principal_of(request)
    if not principal.can(Permission.READ_USAGE):
        raise Forbidden("this token may not read usage")
    return principal


async def _usage(request: Request, account_id: str, query: UsageQuery) -> dict[str, Any]:
    platform = platform_of(request)
    store = platform.usage_store
    rows = await store.usage(
        account_id, token_id=query.token_id, model=query.model, since_day=query.since, until_day=query.until
    )
    days = await store.days(account_id, since_day=query.since, until_day=query.until)
    free = await _free_neurons(request, account_id)
    return envelope(
        {
            "account_id": account_id,
            "since": query.since,
            "until": query.until,
            "rows": [row.as_dict() for row in rows],
            "days": [_day(day, free) for day in days],
            "totals": _totals(rows),
        }
    )


async def _free_neurons(request: Request, account_id: str) -> float:
    """The account's own daily allocation, or the gateway's default (also for an account not in the database)."""
    platform = platform_of(request)
    account = await platform.gateway.identity.get_account(account_id)
    default = platform.settings.daily_free_neurons
    return default if account is None else account.free_neurons(default)


def _day(day: UsageDay, free_neurons: float) -> dict[str, Any]:
    """The account's allocation covers its whole day, whatever the filters on the rows.

    Billable are the neurons beyond it, on either plan: a free account is refused once it has used its
    allocation, so only the request that crossed the line can leave it anything billable.
    """
    return {
        **day.as_dict(),
        "free_neurons": free_neurons,
        "billable_neurons": billable_neurons(day.neurons, free_neurons),
    }


def _totals(rows: list[UsageRow]) -> dict[str, Any]:
    return {
        "requests": sum(r.requests for r in rows),
        "errors": sum(r.errors for r in rows),
        "prompt_tokens": sum(r.prompt_tokens for r in rows),
        "completion_tokens": sum(r.completion_tokens for r in rows),
        "neurons": sum(r.neurons for r in rows),
        "cost_usd": sum(r.cost_usd for r in rows),
    }
