"""Registry authentication for pulls, as the distribution spec's token authentication describes it.

A registry answering 401 says how in `WWW-Authenticate`:
- `Bearer realm="…",service="…",scope="…"`: GET the realm with that service and scope (anonymously, or with
  HTTP Basic credentials when there are some), read `token` (or `access_token`), retry with
  `Authorization: Bearer <token>`. Docker Hub and GHCR answer so even for public images.
- `Basic realm="…"`: retry with the credentials.
Tokens are cached per (registry, scope) until their `expires_in`, and sent up front to the next request that
needs that scope, so one pull asks the token service once. Neither tokens nor passwords enter a message.
"""

import re
import time
from collections.abc import AsyncGenerator, Generator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx

from cirrus.store.oci import RegistryError, RegistryUnreachable, is_loopback
from cirrus.store.registry_credentials import SETTINGS_SOURCE, Credentials

DEFAULT_TOKEN_LIFETIME_S = 60.0  # the spec's default when a token service gives no expires_in
EXPIRY_MARGIN_S = 5.0
TOKEN_TIMEOUT = httpx.Timeout(30.0, connect=5.0)
MAX_TOKEN_RESPONSE_BYTES = 1 << 20
CHALLENGE_PARAM = re.compile(r'([A-Za-z_]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,"]+))')
HOW_TO_LOG_IN = f"set {SETTINGS_SOURCE} or run `docker login`"


class AccessDenied(RegistryError):
    """The registry or its token service refused the credentials, or wants some and none are configured."""


@dataclass(frozen=True)
class Challenge:
    scheme: str  # "bearer" or "basic", lower case
    params: dict[str, str]

    @classmethod
    def parse(cls, header: str) -> "Challenge | None":
        scheme, _, rest = header.strip().partition(" ")
        if not scheme:
            return None
        params = {key.lower(): quoted or bare for key, quoted, bare in CHALLENGE_PARAM.findall(rest)}
        return cls(scheme.lower(), params)


@dataclass
class TokenCache:
    """Authorization header values per (registry, scope), each with the monotonic time it stops being used."""

    _entries: dict[tuple[str, str], tuple[str, float]] = field(default_factory=dict)

    def get(self, registry: str, scope: str) -> str | None:
        entry = self._entries.get((registry, scope))
        if entry is None or entry[1] <= time.monotonic():
            return None
        return entry[0]

    def put(self, registry: str, scope: str, header: str, lifetime_s: float) -> None:
        self._entries[(registry, scope)] = (header, time.monotonic() + max(lifetime_s - EXPIRY_MARGIN_S, 0.0))

    def drop(self, registry: str, scope: str) -> None:
        self._entries.pop((registry, scope), None)


BASIC_SCOPE = "*basic*"  # a registry that took Basic credentials takes them for every scope


class RegistryAuth(httpx.Auth):
    """Answers a registry's 401s for one repository; `what` names the pull in error messages."""

    def __init__(
        self, registry: str, repository: str, credentials: Credentials | None, cache: TokenCache, what: str
    ) -> None:
        self._registry = registry
        self._scope = f"repository:{repository}:pull"
        self._credentials = credentials
        self._cache = cache
        self._what = what

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        raise TypeError("RegistryAuth works with httpx.AsyncClient only")

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        cached = self._cache.get(self._registry, self._scope) or self._cache.get(self._registry, BASIC_SCOPE)
        if cached is not None:
            request.headers["Authorization"] = cached
        response = yield request
        if response.status_code != 401:
            self._check(response)
            return
        if cached is not None:  # expired or revoked early: forget it and answer the challenge afresh
            self._cache.drop(self._registry, self._scope)
            self._cache.drop(self._registry, BASIC_SCOPE)
        # A 401 from another host (a redirect's target) is answered without the registry's credentials.
        login = self._credentials if _same_origin(response.url, request.url) else None
        request.headers["Authorization"] = await self._answer(response, request.url, cached, login)
        response = yield request
        self._check(response)

    async def _answer(
        self, response: httpx.Response, url: httpx.URL, sent: str | None, login: Credentials | None
    ) -> str:
        challenge = Challenge.parse(response.headers.get("WWW-Authenticate", ""))
        if challenge is not None and challenge.scheme == "bearer" and challenge.params.get("realm"):
            return await self._bearer(challenge, url, sent, login)
        if challenge is not None and challenge.scheme == "basic" and login is not None:
            header = login.basic()
            self._cache.put(self._registry, BASIC_SCOPE, header, float("inf"))
            return header
        raise AccessDenied(f"{self._what}: the registry wants credentials (HTTP 401); {HOW_TO_LOG_IN}")

    async def _bearer(
        self, challenge: Challenge, url: httpx.URL, sent: str | None, login: Credentials | None
    ) -> str:
        realm = challenge.params["realm"]
        scope = challenge.params.get("scope", self._scope)
        cached = self._cache.get(self._registry, scope)
        if cached is not None and cached != sent:
            return cached
        params = {"scope": scope} | ({"service": s} if (s := challenge.params.get("service")) else {})
        sending = self._credentials_for(realm, url) if login is not None else None
        headers = {"Authorization": sending.basic()} if sending is not None else {}
        token, lifetime = await self._request_token(realm, params, headers)
        header = f"Bearer {token}"
        self._cache.put(self._registry, scope, header, lifetime)
        return header

    def _credentials_for(self, realm: str, url: httpx.URL) -> Credentials | None:
        """The credentials to send to this realm: never over plain HTTP unless the registry speaks it too."""
        parts = urlsplit(realm)
        if self._credentials is None or parts.scheme == "https" or url.scheme == "http":
            return self._credentials
        if is_loopback(parts.netloc):
            return self._credentials
        raise AccessDenied(f"{self._what}: refusing to send credentials to {_where(realm)} over plain HTTP")

    async def _request_token(
        self, realm: str, params: dict[str, str], headers: dict[str, str]
    ) -> tuple[str, float]:
        try:
            async with httpx.AsyncClient(timeout=TOKEN_TIMEOUT, follow_redirects=True) as client:
                response = await client.get(realm, params=params, headers=headers)
        except httpx.TransportError as exc:
            raise RegistryUnreachable(
                f"{self._what}: cannot reach the token service at {_where(realm)}: {type(exc).__name__}"
            ) from None
        except httpx.InvalidURL:
            raise AccessDenied(f"{self._what}: the registry named an unusable token service") from None
        if response.status_code in (401, 403):
            raise AccessDenied(f"{self._what}: {self._refused(f'the token service at {_where(realm)}')}")
        if response.status_code != 200 or len(response.content) > MAX_TOKEN_RESPONSE_BYTES:
            raise AccessDenied(
                f"{self._what}: the token service at {_where(realm)} answered HTTP {response.status_code}"
            )
        return _token_of(response, self._what, realm)

    def _refused(self, who: str) -> str:
        if self._credentials is None:
            return f"{who} refused anonymous access; {HOW_TO_LOG_IN}"
        return f"{who} refused the credentials from {self._credentials.source}"

    def _check(self, response: httpx.Response) -> None:
        """A registry that still says 401 or 403 after authentication has refused this pull."""
        if response.status_code == 401:
            raise AccessDenied(f"{self._what}: {self._refused('the registry')} (HTTP 401)")
        if response.status_code == 403:
            raise AccessDenied(f"{self._what}: the registry denies access (HTTP 403)")


def _token_of(response: httpx.Response, what: str, realm: str) -> tuple[str, float]:
    try:
        body = response.json()
    except ValueError:
        body = None
    token = (body.get("token") or body.get("access_token")) if isinstance(body, dict) else None
    if not isinstance(token, str) or not token:
        raise AccessDenied(f"{what}: the token service at {_where(realm)} sent no token")
    expires_in = body.get("expires_in") if isinstance(body, dict) else None
    lifetime = float(expires_in) if isinstance(expires_in, int | float) and expires_in > 0 else None
    return token, lifetime or DEFAULT_TOKEN_LIFETIME_S


def _same_origin(one: httpx.URL, other: httpx.URL) -> bool:
    return (one.scheme, one.host, one.port) == (other.scheme, other.host, other.port)


def _where(realm: str) -> str:
    """A realm for messages: scheme, host and path, never a query string (which could carry anything)."""
    parts = urlsplit(realm)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"
