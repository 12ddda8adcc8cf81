"""Liveness and readiness."""

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from cirrus.api.context import platform_of

router = APIRouter(tags=["Health"])


@router.get("/healthz", summary="Liveness: the process answers")
async def liveness() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: the node accepts inference requests")
async def readiness(request: Request) -> Any:
    platform = platform_of(request)
    # A count, not the names: the route needs no token, and which models a node serves is not public.
    installed = sum(1 for entry in platform.catalog.entries() if entry.installed)
    ready = installed > 0
    body = {"status": "ready" if ready else "no models installed", "installed_models": installed}
    return JSONResponse(body, status_code=200 if ready else 503)
