"""A registry token service for tests, as the distribution spec's token authentication describes it.

It runs in a thread on 127.0.0.1 and issues RS256 JWTs that CNCF Distribution accepts: signed with an RSA key
made by the `openssl` CLI (`openssl dgst -sha256 -sign`; no Python crypto library is needed), with the
self-signed certificate in the `x5c` header, which the registry checks against its `rootcertbundle`.
Users with the right password get pull and push; anonymous callers get `anonymous_actions`. Every request
is recorded, so tests can count them.
"""

import base64
import binascii
import http.server
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from tests.services.http_server import serving

SERVICE = "cirrus-test"
ISSUER = "cirrus-test-issuer"
TOKEN_LIFETIME_S = 300
OPENSSL_TIMEOUT_S = 60


@dataclass(frozen=True)
class SigningKey:
    key: Path
    certificate: Path  # PEM: the registry's rootcertbundle
    certificate_der_b64: str  # the JWT's x5c entry

    @classmethod
    def create(cls, folder: Path) -> "SigningKey":
        key, cert = folder / "token-key.pem", folder / "token-cert.pem"
        _openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=cirrus-test-token",
            "-keyout", str(key), "-out", str(cert),
        )  # fmt: skip
        der = _openssl("x509", "-in", str(cert), "-outform", "DER")
        return cls(key, cert, base64.b64encode(der).decode())

    def sign(self, claims: dict[str, object]) -> str:
        header = {"typ": "JWT", "alg": "RS256", "x5c": [self.certificate_der_b64]}
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        signature = _openssl("dgst", "-sha256", "-sign", str(self.key), stdin=signing_input.encode())
        return f"{signing_input}.{_b64url(signature)}"


def _openssl(*args: str, stdin: bytes | None = None) -> bytes:
    result = subprocess.run(
        ["openssl", *args], input=stdin, capture_output=True, timeout=OPENSSL_TIMEOUT_S, check=True
    )
    return result.stdout


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


@dataclass(frozen=True)
class TokenRequest:
    user: str | None  # None: anonymous
    scopes: list[str]
    refused: bool  # a user whose password was wrong


@dataclass
class TokenService:
    realm: str
    key: SigningKey
    users: dict[str, str]
    anonymous_actions: list[str]
    requests: list[TokenRequest] = field(default_factory=list)

    def issue(self, authorization: str | None, query: str) -> tuple[int, dict[str, object]]:
        params = parse_qs(query)
        scopes = [scope for value in params.get("scope", []) for scope in value.split(" ") if scope]
        user, known = _basic_user(authorization, self.users)
        self.requests.append(TokenRequest(user, scopes, refused=user is not None and not known))
        if user is not None and not known:
            return 401, {"errors": [{"code": "UNAUTHORIZED", "message": "wrong credentials"}]}
        actions = ["pull", "push"] if user is not None else self.anonymous_actions
        access = [_grant(scope, actions) for scope in scopes]
        now = int(time.time())
        claims = {
            "iss": ISSUER, "sub": user or "", "aud": params.get("service", [SERVICE])[0],
            "exp": now + TOKEN_LIFETIME_S, "nbf": now - 10, "iat": now, "jti": uuid.uuid4().hex,
            "access": [grant for grant in access if grant["actions"]],
        }  # fmt: skip
        token = self.key.sign(claims)
        return 200, {"token": token, "access_token": token, "expires_in": TOKEN_LIFETIME_S}


def _basic_user(authorization: str | None, users: dict[str, str]) -> tuple[str | None, bool]:
    if not authorization or not authorization.startswith("Basic "):
        return None, False
    try:
        user, _, password = base64.b64decode(authorization[6:], validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return "?", False
    return user, users.get(user) == password


def _grant(scope: str, allowed: list[str]) -> dict[str, object]:
    kind, _, rest = scope.partition(":")
    name, _, wanted = rest.rpartition(":")
    return {"type": kind, "name": name, "actions": [a for a in wanted.split(",") if a in allowed]}


def _handler(service: TokenService) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            status, body = (
                (404, {}) if url.path != "/token" else service.issue(self.headers["Authorization"], url.query)
            )
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@contextmanager
def running_token_service(
    folder: Path, users: dict[str, str], anonymous_actions: list[str]
) -> Iterator[TokenService]:
    """A token service on 127.0.0.1 with a fresh signing key under `folder`; shut down on exit."""
    key = SigningKey.create(folder)
    service = TokenService("", key, users, anonymous_actions)
    with serving(_handler(service)) as server:
        service.realm = f"http://127.0.0.1:{server.server_address[1]}/token"
        yield service
