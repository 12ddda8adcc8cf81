"""Build the ASGI app: routers, error handlers, and the middleware stack in one place."""

import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp

from cirrus.api import account_usage, admin, health, metrics
from cirrus.api.ai_search import autorag as ai_search_autorag
from cirrus.api.ai_search import instances as ai_search_instances
from cirrus.api.ai_search import items as ai_search_items
from cirrus.api.ai_search import search as ai_search_search
from cirrus.api.anthropic import messages
from cirrus.api.openai import batches, chat, completions, embeddings, files, responses
from cirrus.api.openai import models as openai_models
from cirrus.api.workers_ai import finetunes, run
from cirrus.api.workers_ai import models as workers_ai_models
from cirrus.console import routes as console
from cirrus.console.headers import ConsoleHeadersMiddleware
from cirrus.platform import Platform
from cirrus.server.access_log import AccessLogMiddleware
from cirrus.server.ai_search import running_ingest
from cirrus.server.auth import AuthMiddleware
from cirrus.server.batches import running_batches
from cirrus.server.body_limit import BodyLimitMiddleware
from cirrus.server.handlers import install_handlers
from cirrus.server.json_body import JsonBodyMiddleware
from cirrus.server.request_id import RequestIdMiddleware

# Starlette imports anyio's asyncio backend at the first streamed answer; without a bytecode cache that is ~20 ms
# the first caller would wait for. A private module: if anyio moves it, the first caller pays again, nothing breaks.
with contextlib.suppress(ImportError):
    import anyio._backends._asyncio  # noqa: F401

ROUTERS = (
    run.router,
    workers_ai_models.router,
    finetunes.router,
    ai_search_instances.router,
    ai_search_items.router,
    ai_search_search.router,
    ai_search_autorag.router,
    chat.router,
    completions.router,
    responses.router,
    messages.router,
    embeddings.router,
    files.router,
    batches.router,
    openai_models.router,
    account_usage.router,
    admin.router,
    metrics.router,
    health.router,
)


def build_middleware_stack(app: ASGIApp, platform: Platform) -> ASGIApp:
    """Outermost last. The request id wraps everything, so even a refused request carries one and is logged;
    authentication comes before the body is read, so an unauthenticated caller cannot make us read 10 MB."""
    # The console's sessions (build_api installs them) also authenticate API calls the playground makes.
    sessions = app.state.console if isinstance(app, FastAPI) else None
    app = JsonBodyMiddleware(app)
    settings = platform.settings
    upload_limit = settings.finetune_max_asset_bytes + finetunes.FORM_OVERHEAD_BYTES
    app = BodyLimitMiddleware(app, settings.max_body_bytes, {finetunes.ASSET_UPLOAD_PATH: upload_limit})
    app = AuthMiddleware(
        app,
        platform,
        settings.metrics_token_required,
        sessions,
        open_only_on_loopback=not settings.allow_open,
    )
    app = AccessLogMiddleware(app, platform.metrics)
    return RequestIdMiddleware(ConsoleHeadersMiddleware(app))


def build_api(platform: Platform) -> FastAPI:
    """The routes and error handlers, without the middleware; the lifespan starts and closes the platform."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await platform.start()
        try:
            async with running_batches(app, platform), running_ingest(app, platform):
                yield
        finally:
            await platform.close()

    api = FastAPI(
        title="Cirrus",
        version="0.1.0",
        lifespan=lifespan,
        # FastAPI's /docs and /redoc pages load their scripts from a CDN: a compromised package would then run
        # on the console's origin, next to its admin sessions. The description itself stays at /openapi.json.
        docs_url=None,
        redoc_url=None,
        description="Serverless LLM inference: Workers AI and OpenAI-compatible APIs.",
    )
    api.state.platform = platform
    for router in ROUTERS:
        api.include_router(router)
    install_handlers(api)
    console.install_for(api, platform)

    def openapi() -> dict[str, Any]:
        """FastAPI's document, plus the Workers AI task inputs its run routes validate themselves."""
        if api.openapi_schema is None:
            schema = FastAPI.openapi(api)
            schema.setdefault("components", {}).setdefault("schemas", {}).update(run.input_schemas())
        return api.openapi_schema or {}

    api.openapi = openapi  # type: ignore[method-assign]
    return api


def create_app(platform: Platform) -> ASGIApp:
    return build_middleware_stack(build_api(platform), platform)
