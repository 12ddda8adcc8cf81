"""Logs: an account's latest requests with their metered fields, filtered by model, status and token; a request
id opens its record. Prompts and answers are never shown: they are not stored (see read_models/logs.py)."""

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from cirrus.api.context import platform_of
from cirrus.auth import Permission
from cirrus.console.pages.figures import FIGURES
from cirrus.console.pages.usage import account_choices, viewed_account
from cirrus.console.read_models.logs import FilterError, LogFilters, RequestLog, is_error, utc_time
from cirrus.console.rendering import render
from cirrus.console.session import ConsolePrincipal, require_permission

router = APIRouter()
PAGE = "/console/logs"


@router.get(PAGE, response_class=HTMLResponse)
async def logs_page(request: Request, principal: ConsolePrincipal) -> HTMLResponse:
    require_permission(principal, Permission.READ_USAGE)
    account = viewed_account(request, principal)
    platform = platform_of(request)
    tokens = await platform.gateway.identity.list_tokens(account)
    context: dict[str, Any] = {
        **_helpers(),
        "account": account,
        "accounts": await account_choices(platform, principal, account),
        "models": sorted(spec.id for spec in platform.catalog.specs()),
        "tokens": tokens,
        "token_names": {token.id: token.name for token in tokens},
    }
    try:
        filters = LogFilters.parse(account, request.query_params)
    except FilterError as error:
        context.update(error=str(error), filters=LogFilters(account), page=None)
        return render(request, "logs.html", context, status_code=400)
    page = await RequestLog(platform.usage_store).page(filters)
    return render(request, "logs.html", {**context, "filters": filters, "page": page})


@router.get(PAGE + "/{request_id}", response_class=HTMLResponse)
async def log_record(request_id: str, request: Request, principal: ConsolePrincipal) -> HTMLResponse:
    require_permission(principal, Permission.READ_USAGE)
    account = viewed_account(request, principal)
    platform = platform_of(request)
    records = await RequestLog(platform.usage_store).request(account, request_id)
    tokens = {token.id: token.name for token in await platform.gateway.identity.list_tokens(account)}
    context = {
        **_helpers(),
        "account": account,
        "request_id": request_id,
        "records": records,
        "token_names": tokens,
    }
    return render(request, "log_record.html", context, status_code=200 if records else 404)


def _helpers() -> dict[str, Any]:
    return {"fmt": FIGURES, "utc_time": utc_time, "is_error": is_error}
