"""The console's routes, its static assets and error pages, installed on the API app by `install`."""

from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from cirrus.auth.store import IdentityStore
from cirrus.console.access import Authenticator, ConsoleAccess
from cirrus.console.pages import keys, logs, models, nodes, overview, playground, signin, usage
from cirrus.console.read_models.overview import OverviewReader
from cirrus.console.rendering import render
from cirrus.console.session import ConsoleForbidden, SignInRequired
from cirrus.db.database import Database
from cirrus.platform import Platform

STATIC = Path(__file__).parent / "static"
API_PREFIX = "/console/api/"

router = APIRouter(include_in_schema=False)
for page in (signin, overview, playground, models, usage, logs, keys, nodes):
    router.include_router(page.router)


class PlatformSource:
    """The gateway parts of a running platform, None until it has opened them."""

    def __init__(self, platform: Platform) -> None:
        self._platform = platform

    def authenticator(self) -> Authenticator | None:
        return self._platform.authenticator()

    def identity(self) -> IdentityStore | None:
        return self._platform.gateway.identity if self._platform.gateway_open else None

    def database(self) -> Database | None:
        return self._platform.gateway.db if self._platform.gateway_open else None


def install_for(api: FastAPI, platform: Platform) -> None:
    access = ConsoleAccess(PlatformSource(platform), platform.settings.console_session_hours * 3600)
    install(api, access, OverviewReader(platform))


def install(api: FastAPI, access: ConsoleAccess, overview: OverviewReader) -> None:
    api.state.console = access
    api.state.console_overview = overview
    api.mount("/console/static", StaticFiles(directory=STATIC), name="console-static")
    api.include_router(router)
    api.add_exception_handler(SignInRequired, _sign_in_required)
    api.add_exception_handler(ConsoleForbidden, _forbidden)


async def _sign_in_required(request: Request, exc: Exception) -> Response:
    if request.url.path.startswith(API_PREFIX):
        return JSONResponse({"error": "sign in first", "sign_in": signin.SIGN_IN}, status_code=401)
    return signin.see_other(signin.SIGN_IN)


async def _forbidden(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ConsoleForbidden)
    if request.url.path.startswith(API_PREFIX):
        return JSONResponse({"error": exc.message}, status_code=403)
    return render(request, "error.html", {"heading": "Not allowed", "message": exc.message}, status_code=403)
