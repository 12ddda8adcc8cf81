"""Keys (admin only): accounts and their API tokens. Create a token (its secret shown once, on the answer to the
form, never again), revoke one, create an account and change its plan, allocation and deny patterns: what
`cirrus tokens ...` and `cirrus accounts ...` do, on the same identity store. Every change is a POST with the
session's CSRF token."""

import time
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from cirrus.api.context import platform_of
from cirrus.auth import Permission, Principal
from cirrus.auth.store import IdentityError, IdentityStore, TokenInfo
from cirrus.console.forms import form_fields
from cirrus.console.pages.figures import FIGURES
from cirrus.console.pages.keys_forms import AccountSettings, FormError, NewAccount, NewToken
from cirrus.console.rendering import render
from cirrus.console.session import ConsolePrincipal, require_csrf, require_permission

router = APIRouter()
PAGE = "/console/keys"
CHANGES = [Depends(require_csrf)]
NOTICES = ("revoked", "updated", "created_account")  # what a redirect after a change may say, by id


def token_state(token: TokenInfo, now: float) -> str:
    if token.revoked_at is not None:
        return "revoked"
    if token.expires_at is not None and token.expires_at <= now:
        return "expired"
    return "active"


def identity_of(request: Request, principal: Principal) -> IdentityStore:
    require_permission(principal, Permission.ADMIN)
    return platform_of(request).gateway.identity


async def _page(
    request: Request, principal: Principal, notice: dict[str, Any], status_code: int = 200
) -> HTMLResponse:
    platform = platform_of(request)
    identity = platform.gateway.identity
    accounts, tokens = await identity.list_accounts(), await identity.list_tokens()
    context = {
        "fmt": FIGURES,
        "now": time.time(),
        "token_state": token_state,
        "accounts": accounts,
        "tokens": tokens,
        "default_free_neurons": platform.settings.daily_free_neurons,
        "cache_ttl_s": platform.settings.auth_cache_ttl_s,
        "permissions": list(Permission),
        "own_account": principal.account_id,
        **_known(notice, {a.id for a in accounts}, {t.id for t in tokens if t.revoked_at is not None}),
    }
    return render(request, "keys.html", context, status_code=status_code)


@router.get(PAGE, response_class=HTMLResponse)
async def keys_page(request: Request, principal: ConsolePrincipal) -> HTMLResponse:
    identity_of(request, principal)
    params = request.query_params
    return await _page(request, principal, {k: params[k] for k in NOTICES if params.get(k)})


@router.post(PAGE + "/tokens", dependencies=CHANGES)
async def create_token(request: Request, principal: ConsolePrincipal) -> Response:
    identity = identity_of(request, principal)
    try:
        wanted = NewToken.parse(await form_fields(request))
        secret, token = await identity.create_token(
            wanted.account_id, wanted.name, **wanted.store_arguments()
        )
    except (FormError, ValueError) as error:  # IdentityError (an unknown account) is a ValueError too
        return await _page(request, principal, {"error": str(error)}, status_code=400)
    return await _page(request, principal, {"new_secret": secret, "new_token": token}, status_code=201)


@router.post(PAGE + "/tokens/{token_id}/revoke", dependencies=CHANGES)
async def revoke_token(token_id: str, request: Request, principal: ConsolePrincipal) -> Response:
    identity = identity_of(request, principal)
    if not await identity.revoke_token(token_id):
        return await _page(request, principal, {"error": f"No active token {token_id}."}, status_code=404)
    platform_of(request).gateway.authenticator.forget_tokens()
    return _back({"revoked": token_id})


@router.post(PAGE + "/accounts", dependencies=CHANGES)
async def create_account(request: Request, principal: ConsolePrincipal) -> Response:
    identity = identity_of(request, principal)
    try:
        wanted = NewAccount.parse(await form_fields(request))
        account = await identity.create_account(wanted.name, wanted.plan, wanted.account_id)
    except (FormError, IdentityError) as error:
        return await _page(request, principal, {"error": str(error)}, status_code=400)
    return _back({"created_account": account.id})


@router.post(PAGE + "/accounts/{account_id}", dependencies=CHANGES)
async def update_account(account_id: str, request: Request, principal: ConsolePrincipal) -> Response:
    identity = identity_of(request, principal)
    try:
        settings = AccountSettings.parse(await form_fields(request))
        await identity.set_plan(account_id, settings.plan)
        await identity.set_daily_free_neurons(account_id, settings.daily_free_neurons)
        await identity.set_deny_patterns(account_id, settings.deny_patterns)
    except (FormError, IdentityError) as error:
        return await _page(request, principal, {"error": str(error)}, status_code=400)
    return _back({"updated": account_id})


def _known(notice: dict[str, Any], accounts: set[str], revoked: set[str]) -> dict[str, Any]:
    """The notice, without what a crafted link could claim falsely (a token revoked that was not)."""
    ids = {"revoked": revoked, "updated": accounts, "created_account": accounts}
    return {k: v for k, v in notice.items() if k not in ids or v in ids[k]}


def _back(notice: dict[str, str]) -> RedirectResponse:
    """After a change, a GET of the page (so a reload does not repeat it), saying what was done."""
    return RedirectResponse(f"{PAGE}?{urlencode(notice)}", status_code=303)
