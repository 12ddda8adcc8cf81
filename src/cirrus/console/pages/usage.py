"""Usage: an account's requests, tokens, neurons, cost, cache hits and errors per day, model and token, charted
by model, with its daily allocation and its tokens' monthly limits as gauges, and the same rows as CSV.

A principal reads its own account; an admin may pick any (`?account=`), as on the Logs page.
"""

import csv
import io
import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from cirrus.api.context import platform_of
from cirrus.auth import Permission, Principal
from cirrus.console.pages.figures import FIGURES
from cirrus.console.read_models.usage import FilterError, UsageFilters, UsageReader, UsageReport
from cirrus.console.rendering import render
from cirrus.console.session import ConsoleForbidden, ConsolePrincipal, require_permission
from cirrus.console.svg import gauge, stacked_bars
from cirrus.platform import Platform

router = APIRouter()
PAGE = "/console/usage"
CSV_COLUMNS = (
    "day",
    "model",
    "token_id",
    "requests",
    "errors",
    "cache_hits",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "neurons",
    "cost_usd",
)


def viewed_account(request: Request, principal: Principal) -> str:
    """The account a usage or logs page shows: the principal's own, or with `admin`, the one it asks for."""
    requested = request.query_params.get("account") or principal.account_id
    if requested != principal.account_id and not principal.can(Permission.ADMIN):
        raise ConsoleForbidden("Only an admin token may read the usage of another account.")
    return requested


async def account_choices(platform: Platform, principal: Principal, current: str) -> list[tuple[str, str]]:
    """(id, label) of the accounts an admin may pick from; empty for anyone else (they see only their own)."""
    if not principal.can(Permission.ADMIN):
        return []
    accounts = await platform.gateway.identity.list_accounts()
    choices = {account.id: f"{account.name} ({account.id})" for account in accounts}
    for own in (principal.account_id, current):
        choices.setdefault(own, own)
    return sorted(choices.items(), key=lambda item: item[1].lower())


def reader_of(platform: Platform) -> UsageReader:
    gateway = platform.gateway
    return UsageReader(gateway.usage_store, gateway.identity, platform.settings.daily_free_neurons)


@router.get(PAGE, response_class=HTMLResponse)
async def usage_page(request: Request, principal: ConsolePrincipal) -> HTMLResponse:
    require_permission(principal, Permission.READ_USAGE)
    account = viewed_account(request, principal)
    platform = platform_of(request)
    now = time.time()
    context: dict[str, Any] = {
        "fmt": FIGURES,
        "account": account,
        "accounts": await account_choices(platform, principal, account),
        "models": sorted(spec.id for spec in platform.catalog.specs()),
    }
    try:
        filters = UsageFilters.parse(account, request.query_params, now)
    except FilterError as error:
        fallback = UsageFilters.parse(account, {}, now)
        return render(request, "usage.html", {**context, "error": str(error), "filters": fallback}, 400)
    report = await reader_of(platform).report(filters, now)
    context.update(_report_context(report))
    return render(request, "usage.html", context)


def _report_context(report: UsageReport) -> dict[str, Any]:
    account = report.filters.account_id
    return {
        "filters": report.filters,
        "report": report,
        "token_names": {token.id: token.name for token in report.tokens},
        "requests_chart": stacked_bars(
            report.days,
            report.requests_by_model,
            title=f"Requests per day by model, account {account}",
            whole_numbers=True,
        ),
        "neurons_chart": stacked_bars(
            report.days, report.neurons_by_model, title=f"Neurons per day by model, account {account}"
        ),
        "allocation_gauge": gauge(
            report.allocation.used, report.allocation.limit, title=report.allocation.label
        ),
        "limit_gauges": [(g, gauge(g.used, g.limit, title=g.label)) for g in report.token_limits],
    }


@router.get(PAGE + ".csv")
async def usage_csv(request: Request, principal: ConsolePrincipal) -> Response:
    require_permission(principal, Permission.READ_USAGE)
    account = viewed_account(request, principal)
    try:
        filters = UsageFilters.parse(account, request.query_params, time.time())
    except FilterError as error:
        return Response(f"{error}\n", status_code=400, media_type="text/plain")
    rows = await reader_of(platform_of(request)).rows(filters)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in rows:
        values = row.as_dict()
        writer.writerow([values[c] if values[c] is not None else "" for c in CSV_COLUMNS])
    name = f"usage-{_safe(account)}-{filters.since}-{filters.until}.csv"
    headers = {"Content-Disposition": f'attachment; filename="{name}"', "Cache-Control": "no-store"}
    return Response(out.getvalue(), media_type="text/csv; charset=utf-8", headers=headers)


def _safe(text: str) -> str:
    """An account id as a file name: account ids are letters, digits, `.`, `_` and `-` already; this is a guard."""
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text)[:64]
