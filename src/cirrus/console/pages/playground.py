"""Playground: chat with a model over the real `/v1/chat/completions` route, streamed, with the session cookie
and X-Cirrus-CSRF (server/auth.py); embeddings over `/v1/embeddings`. The page's JS sends the exact request a
user would; this module serves the page and the usage records of its answers (neurons, cost)."""

from typing import Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse, JSONResponse

from cirrus.api.context import platform_of
from cirrus.auth import Permission
from cirrus.console.read_models.playground import playground_models
from cirrus.console.rendering import render
from cirrus.console.session import ConsolePrincipal, require_permission

router = APIRouter()
REQUEST_ID = r"^[A-Za-z0-9._:-]{1,128}$"


@router.get("/console/playground", response_class=HTMLResponse)
async def playground_page(request: Request, principal: ConsolePrincipal) -> HTMLResponse:
    require_permission(principal, Permission.RUN)
    models = playground_models(platform_of(request).catalog, principal)
    context = {
        "models": models,
        "base_url": str(request.base_url).rstrip("/"),
    }
    return render(request, "playground.html", context)


@router.get("/console/api/playground/records/{request_id}")
async def answer_records(
    request: Request, principal: ConsolePrincipal, request_id: str = Path(pattern=REQUEST_ID)
) -> JSONResponse:
    """The usage records of one of the caller's own requests: written a moment after the answer ends, so the
    page asks again until they are there."""
    require_permission(principal, Permission.RUN)
    records = await platform_of(request).usage_store.request_events(principal.account_id, request_id)
    body: dict[str, Any] = {"records": [record.as_dict() for record in records]}
    return JSONResponse(body, headers={"Cache-Control": "no-store"})
