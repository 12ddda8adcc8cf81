"""FastAPI dependencies for console routes: who is signed in, CSRF on state changes, permissions.

`console_principal` sends a browser without a session to the sign-in page (303), or answers a console JSON
endpoint 401; `require_csrf` refuses a state-changing request without the session's CSRF token (form field
`csrf` or header `X-Cirrus-CSRF`) with 403; `require_permission` answers 403 to a principal without it.
"""

from typing import Annotated

from fastapi import Depends, Request

from cirrus.auth import Permission, Principal
from cirrus.console.access import ConsoleAccess, ConsoleUser, csrf_matches
from cirrus.console.forms import form_fields
from cirrus.console.session_store import ConsoleSession
from cirrus.gateway.open_mode import is_loopback_host

__all__ = [
    "COOKIE",
    "ConsoleForbidden",
    "ConsolePrincipal",
    "ConsoleSession",
    "SignInRequired",
    "console_principal",
    "console_user",
    "require_csrf",
    "require_permission",
]

COOKIE = "cirrus_session"
# An open node's console acts as an admin for whoever reaches it, so it answers only under a loopback name: a
# page elsewhere that rebinds its own domain to 127.0.0.1 sends its domain as Host and is refused.
OPEN_NODE_HOST = (
    "This node runs open (no tokens), so its console answers only at a loopback address such as "
    "http://127.0.0.1:8787/; create a token (`cirrus tokens create`) to sign in from elsewhere."
)
CSRF_HEADER = "x-cirrus-csrf"
CSRF_FIELD = "csrf"


class SignInRequired(Exception):
    """No usable session: the handler redirects a page to sign-in, and answers a JSON endpoint 401."""


class ConsoleForbidden(Exception):
    """Answered 403 with this message, as a page or as JSON for `/console/api/`."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def console_access(request: Request) -> ConsoleAccess:
    access: ConsoleAccess = request.app.state.console
    return access


async def console_user(request: Request) -> ConsoleUser:
    """Resolved once per request and kept on `request.state.console_user` for rendering."""
    user: ConsoleUser | None = getattr(request.state, "console_user", None)
    if user is None:
        user = await console_access(request).user(request.cookies.get(COOKIE))
        if user is None:
            raise SignInRequired()
        if user.open_node and not is_loopback_host(request.headers.get("host", "")):
            raise ConsoleForbidden(OPEN_NODE_HOST)
        request.state.console_user = user
    return user


async def console_principal(request: Request) -> Principal:
    return (await console_user(request)).principal


async def require_csrf(request: Request) -> None:
    user = await console_user(request)
    given = request.headers.get(CSRF_HEADER) or (await form_fields(request)).get(CSRF_FIELD)
    if not given or not csrf_matches(user.csrf, given):
        raise ConsoleForbidden("This request lacks the console's CSRF token; reload the page and try again.")


def require_permission(principal: Principal, permission: Permission) -> None:
    if not principal.can(permission):
        raise ConsoleForbidden(f"This page needs a token with the {permission} permission.")


# For a route's signature: `principal: ConsolePrincipal`.
ConsolePrincipal = Annotated[Principal, Depends(console_principal)]
