"""Authenticate every request: a bearer token becomes the principal the request acts as.

With no token ever created, a node on loopback runs open (local development): every request acts as the open
principal. A node on any other address never runs open unless told to (`--allow-open`), and no node goes back
to open once a token was created: when its last token is revoked or expires it refuses everyone. Otherwise a request without a valid token is refused with 401 before anything else happens, and
the answer is the same whether the token is unknown, revoked or expired. A token acts only for its own account
(`/client/v4/accounts/{id}/...`) and only an admin token reaches the operator routes.

The console (`/` and `/console/...`) authenticates its own pages: a browser signs in there once and holds a
session cookie. That cookie also authenticates the API routes, so the playground sends the exact request a user
would through the same pipeline (metering, limits, guardrails), but only without an Authorization header and
only with the session's CSRF token in `X-Cirrus-CSRF`: a cookie alone, which a browser attaches to a request any
page forges, is never enough (a good session without that header is 403). A bearer token always wins over a cookie.

An open node (no tokens, on loopback) answers only requests whose `Host` is a loopback name: a web page the
user visits could otherwise rebind its own domain to 127.0.0.1 and use the node, and its console, as an admin.
`--allow-open` (a node meant to be reached openly by other names) lifts that.

While the token database is unavailable, tokens this gateway checked recently keep working (gateway/components.py
and auth/cache.py say how long); any other request is refused with 503 / 3057 and `Retry-After`, in the caller's
protocol. This middleware sits outside the app's error handlers, so it renders every failure itself: an
unexpected one is a JSON 500 in that protocol too, never a plain-text page.
"""

import logging
import re
from typing import Protocol

from starlette.types import ASGIApp, Receive, Scope, Send

from cirrus.api.errors import error_response
from cirrus.api.protocol import protocol_for
from cirrus.auth import OPEN_PRINCIPAL, Permission, Principal
from cirrus.console.headers import is_console_path
from cirrus.errors import CirrusError, Forbidden, InternalError, NotReady, Unauthorized
from cirrus.gateway.open_mode import is_loopback_host

log = logging.getLogger(__name__)

PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/openapi.json"})
OPEN_NODE_HOST = (
    "This node runs open (no tokens), so it answers only under a loopback name such as 127.0.0.1; create a token "
    "(`cirrus tokens create`) to call it by any other name."
)
SESSION_COOKIE = b"cirrus_session"
CSRF_HEADER = b"x-cirrus-csrf"
ADMIN_PREFIX = "/admin/"
METRICS_PATH = "/metrics"
_ACCOUNT_PATH = re.compile(r"^/client/v4/accounts/([^/]+)/")


class Authenticator(Protocol):
    async def authenticate(self, secret: str) -> Principal | None: ...

    async def requires_token(self) -> bool: ...


class ConsoleSessions(Protocol):
    async def api_principal(self, session_id: str, csrf: str | None) -> Principal | None: ...


class AuthSource(Protocol):
    """Where the middleware finds the authenticator once the gateway has opened its store."""

    def authenticator(self) -> Authenticator | None: ...


class AuthMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        source: AuthSource,
        metrics_need_token: bool,
        sessions: ConsoleSessions | None = None,
        open_only_on_loopback: bool = False,
    ) -> None:
        self.app = app
        self.source = source
        self.metrics_need_token = metrics_need_token
        self.sessions = sessions
        self.open_only_on_loopback = open_only_on_loopback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._is_public(scope["path"]):
            await self.app(scope, receive, send)
            return
        try:
            principal = await self._principal(scope)
            _check_route(scope["path"], principal)
        except CirrusError as error:
            await error_response(error, protocol_for(scope["path"]))(scope, receive, send)
            return
        except Exception:
            log.exception("authentication failed unexpectedly")
            failed = InternalError("Authentication failed unexpectedly; the error is in the gateway's log.")
            await error_response(failed, protocol_for(scope["path"]))(scope, receive, send)
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)

    def _is_public(self, path: str) -> bool:
        if is_console_path(path):  # the console authenticates itself (cirrus/console/session.py)
            return True
        return path in PUBLIC_PATHS or (path == METRICS_PATH and not self.metrics_need_token)

    async def _principal(self, scope: Scope) -> Principal:
        authenticator = self.source.authenticator()
        if authenticator is None:  # the gateway's store is not open yet (or failed to open): fail closed
            raise NotReady("the gateway is not ready yet", retry_after_s=1)
        if not await authenticator.requires_token():
            if self.open_only_on_loopback and not is_loopback_host(_header(scope, b"host") or ""):
                raise Forbidden(OPEN_NODE_HOST)
            return OPEN_PRINCIPAL
        secret = _token(scope)
        if secret is not None:
            principal = await authenticator.authenticate(secret)
        elif _credentials_sent(scope):  # a malformed or empty Authorization / x-api-key: never the cookie's
            principal = None
        else:
            principal = await self._session_principal(scope)
        if principal is None:
            raise Unauthorized("Authentication error", headers={"WWW-Authenticate": "Bearer"})
        return principal

    async def _session_principal(self, scope: Scope) -> Principal | None:
        session_id = _cookie(scope, SESSION_COOKIE)
        if self.sessions is None or session_id is None:
            return None
        return await self.sessions.api_principal(session_id, _header(scope, CSRF_HEADER))


def _header(scope: Scope, wanted: bytes) -> str | None:
    for name, value in scope.get("headers", []):
        if name == wanted:
            return str(value.decode("latin-1"))
    return None


def _credentials_sent(scope: Scope) -> bool:
    return any(name in (b"authorization", b"x-api-key") for name, _ in scope.get("headers", []))


def _cookie(scope: Scope, wanted: bytes) -> str | None:
    """The named cookie's value, read from every Cookie header without parsing the others' values; the last
    one sent wins, as in Starlette's `request.cookies`, so the console and the API read the same session."""
    found = None
    for name, value in scope.get("headers", []):
        if name != b"cookie":
            continue
        for pair in value.split(b";"):
            key, _, cookie = pair.strip().partition(b"=")
            if key == wanted and cookie:
                found = str(cookie.decode("latin-1"))
    return found


def _token(scope: Scope) -> str | None:
    """`Authorization: Bearer <token>`, or Anthropic's `x-api-key: <token>` header, which its SDKs send."""
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() or None if scheme.lower() == "bearer" else None
        if name == b"x-api-key":
            return value.decode("latin-1").strip() or None
    return None


def _check_route(path: str, principal: Principal) -> None:
    """Same answer whether the account or route target exists, so a refusal reveals nothing."""
    account = _ACCOUNT_PATH.match(path)
    open_node = principal.token_id is None
    if account and not open_node and account.group(1) != principal.account_id:
        raise Forbidden("Authentication error: this token cannot act for that account")
    if (path.startswith(ADMIN_PREFIX) or path == METRICS_PATH) and not principal.can(Permission.ADMIN):
        raise Forbidden("Authentication error: this route needs a token with the admin permission")
