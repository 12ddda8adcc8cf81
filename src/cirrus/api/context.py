"""What a route handler needs from the running node, looked up from the request (no globals)."""

from starlette.requests import Request

from cirrus.auth import OPEN_PRINCIPAL, Principal
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
