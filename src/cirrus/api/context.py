"""What a route handler needs from the running node, looked up from the request (no globals)."""

from starlette.requests import Request

from cirrus.auth import OPEN_PRINCIPAL, Permission, Principal
from cirrus.errors import Forbidden
from cirrus.platform import Platform


def platform_of(request: Request) -> Platform:
    platform: Platform = request.app.state.platform
    return platform


def affinity_of(request: Request) -> str | None:
    """The `x-session-affinity` header: requests sharing it go to the instance that holds their prefix."""
    return request.headers.get("x-session-affinity") or None


def request_id_of(request: Request) -> str:
    return str(request.scope.get("state", {}).get("request_id", ""))


def principal_of(request: Request) -> Principal:
    """Set by the auth middleware; an app without it (the embedded SDK) acts as the open principal."""
    principal = request.scope.get("state", {}).get("principal")
    return principal if isinstance(principal, Principal) else OPEN_PRINCIPAL


def run_account(request: Request) -> str:
    """The caller's account, once its token may run models (files, batches, fine-tunes and AI Search are
    inference work)."""
    principal = principal_of(request)
    if not principal.can(Permission.RUN):
        raise Forbidden("Authentication error: this token lacks the run permission")
    return principal.account_id
