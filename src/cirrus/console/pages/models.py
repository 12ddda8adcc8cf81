"""Models: the catalog with install state, memory fit, instances, prices and packed variants; admins load
(prewarm) and unload models through the same code as `POST /admin/models/{model}/load` and `/unload`."""

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from cirrus.api import admin
from cirrus.api.context import platform_of
from cirrus.auth import Permission, Principal
from cirrus.console.pages.figures import FIGURES
from cirrus.console.read_models.models import ModelsView, model_cards
from cirrus.console.rendering import render
from cirrus.console.session import ConsolePrincipal, require_csrf, require_permission
from cirrus.errors import CirrusError
from cirrus.platform import Platform
from cirrus.store.local import LocalStore

router = APIRouter()
PAGE = "/console/models"
AdminAction = Callable[[str, Request], Awaitable[dict[str, Any]]]


def instances_of(platform: Platform) -> list[tuple[str, str]]:
    if platform.cluster is not None:
        return [(str(i["model"]), str(i["state"])) for i in platform.cluster.instances()]
    return [(s.model, s.state) for s in platform.pool.statuses()]


async def models_view(platform: Platform) -> ModelsView:
    """The pool's state is read here, on the event loop that changes it; the catalog's files and the store's
    manifests are read in a thread."""
    pool = platform.pool
    known, instances = platform.launcher.known_sizes(), instances_of(platform)
    store = LocalStore.from_settings(platform.settings)
    cards = await asyncio.to_thread(model_cards, platform.catalog, store, known, instances, pool.budget_bytes)
    return ModelsView(pool.budget_bytes, pool.used_bytes(), cards)


@router.get(PAGE, response_class=HTMLResponse)
async def models_page(request: Request, principal: ConsolePrincipal) -> HTMLResponse:
    require_permission(principal, Permission.RUN)
    known = {spec.id for spec in platform_of(request).catalog.specs()}
    done = {
        k: request.query_params[k] for k in ("loaded", "unloaded") if request.query_params.get(k) in known
    }
    return await _page(request, principal, done)


async def _page(
    request: Request, principal: Principal, notice: dict[str, Any], status_code: int = 200
) -> HTMLResponse:
    """An admin sees every model and the node's internals (memory, instances, packed variants); anyone else the
    models its token may use, with their prices and whether they are installed."""
    platform = platform_of(request)
    view = await models_view(platform)
    admin_view = principal.can(Permission.ADMIN)
    if not admin_view:
        view = dataclasses.replace(view, cards=[c for c in view.cards if principal.may_use(c.spec.id)])
    context = {"view": view, "admin": admin_view, "cluster": platform.cluster is not None, "fmt": FIGURES}
    context.update(notice)
    return render(request, "models.html", context, status_code=status_code)


@router.post(PAGE + "/{model:path}/load", dependencies=[Depends(require_csrf)])
async def load(model: str, request: Request, principal: ConsolePrincipal) -> Response:
    require_permission(principal, Permission.ADMIN)
    return await _act(request, principal, model, "loaded", admin.load_model)


@router.post(PAGE + "/{model:path}/unload", dependencies=[Depends(require_csrf)])
async def unload(model: str, request: Request, principal: ConsolePrincipal) -> Response:
    require_permission(principal, Permission.ADMIN)
    return await _act(request, principal, model, "unloaded", admin.unload_model)


async def _act(
    request: Request, principal: Principal, model: str, done: str, action: AdminAction
) -> Response:
    try:
        await action(model, request)
    except CirrusError as error:
        return await _page(
            request, principal, {"error": f"{model}: {error.message}"}, status_code=error.status
        )
    return RedirectResponse(f"{PAGE}?{urlencode({done: model})}", status_code=303)
