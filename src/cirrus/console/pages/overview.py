"""Overview: node health and readiness, instances and memory, the last hour's traffic; the page polls
`/console/api/overview` every 2 s and updates its numbers."""

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse

from cirrus.auth import Permission
from cirrus.console.read_models.overview import OverviewReader
from cirrus.console.rendering import render
from cirrus.console.session import ConsolePrincipal, require_permission

router = APIRouter()


def overview_reader(request: Request) -> OverviewReader:
    reader: OverviewReader = request.app.state.console_overview
    return reader


@router.get("/console/overview", response_class=HTMLResponse)
async def overview_page(request: Request, principal: ConsolePrincipal) -> HTMLResponse:
    require_permission(principal, Permission.READ_USAGE)
    overview = await overview_reader(request).read(principal)
    return render(request, "overview.html", {"overview": overview})


@router.get("/console/api/overview")
async def overview_json(request: Request, principal: ConsolePrincipal) -> JSONResponse:
    require_permission(principal, Permission.READ_USAGE)
    overview: dict[str, Any] = await overview_reader(request).read(principal)
    return JSONResponse(overview, headers={"Cache-Control": "no-store"})
