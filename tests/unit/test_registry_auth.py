"""Registry authentication: challenges, the token cache, where credentials come from and where they go."""

import asyncio
import base64
import contextlib
import http.server
import json
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import httpx
import pytest
from pydantic import SecretStr

from cirrus.config import Settings
from cirrus.store.registry_auth import AccessDenied, Challenge, RegistryAuth, TokenCache
from cirrus.store.registry_credentials import (
    SETTINGS_SOURCE,
    Credentials,
    CredentialsError,
    CredentialStore,
    docker_config_credentials,
)
from tests.services import http_server

PASSWORD = "hunter2-secret"


def auth(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


def docker_config(tmp_path: Path, auths: dict[str, object]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"auths": auths}))
    return path


def test_a_bearer_challenge_keeps_a_scope_with_commas() -> None:
    header = 'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:a/b:pull,push"'
    challenge = Challenge.parse(header)
    assert challenge == Challenge(
        "bearer",
        {
            "realm": "https://auth.docker.io/token",
            "service": "registry.docker.io",
            "scope": "repository:a/b:pull,push",
        },
    )


def test_a_basic_challenge_and_unquoted_values() -> None:
    assert Challenge.parse('Basic realm="Registry Realm"') == Challenge("basic", {"realm": "Registry Realm"})
    assert Challenge.parse("Bearer realm=https://x/token, service=s") == Challenge(
        "bearer", {"realm": "https://x/token", "service": "s"}
    )
    assert Challenge.parse("") is None


def test_cached_tokens_are_per_registry_and_scope_and_expire() -> None:
    cache = TokenCache()
    cache.put("r:5000", "repository:a:pull", "Bearer one", lifetime_s=300)
    cache.put("r:5000", "repository:b:pull", "Bearer gone", lifetime_s=1)  # inside the safety margin
    assert cache.get("r:5000", "repository:a:pull") == "Bearer one"
    assert cache.get("other:5000", "repository:a:pull") is None
    assert cache.get("r:5000", "repository:b:pull") is None
    cache.drop("r:5000", "repository:a:pull")
    assert cache.get("r:5000", "repository:a:pull") is None


def test_credentials_never_show_their_password() -> None:
    credentials = Credentials("alice", PASSWORD, "test")
    assert PASSWORD not in repr(credentials) and PASSWORD not in str(credentials)
    assert credentials.basic() == f"Basic {auth('alice', PASSWORD)}"


def test_docker_config_entries_by_host_url_and_docker_hub_alias(tmp_path: Path) -> None:
    path = docker_config(
        tmp_path,
        {
            "ghcr.io": {"auth": auth("gh", "token:with:colons")},
            "https://index.docker.io/v1/": {"auth": auth("hub", PASSWORD)},
            "http://127.0.0.1:5000": {"username": "local", "password": "pw"},
        },
    )
    ghcr = docker_config_credentials(path, "ghcr.io")
    assert ghcr is not None and (ghcr.username, ghcr.password) == ("gh", "token:with:colons")
    hub = docker_config_credentials(path, "registry-1.docker.io")
    assert hub is not None and hub.username == "hub" and str(path) in hub.source
    local = docker_config_credentials(path, "127.0.0.1:5000")
    assert local is not None and local.username == "local"
    assert docker_config_credentials(path, "quay.io") is None
    assert docker_config_credentials(tmp_path / "absent.json", "ghcr.io") is None


def test_an_undecodable_docker_auth_is_one_error_without_the_secret(tmp_path: Path) -> None:
    path = docker_config(tmp_path, {"ghcr.io": {"auth": f"{PASSWORD}!!"}})
    with pytest.raises(CredentialsError, match="not base64 of user:password") as error:
        docker_config_credentials(path, "ghcr.io")
    assert PASSWORD not in str(error.value)
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(CredentialsError, match="not a readable Docker config"):
        docker_config_credentials(tmp_path / "broken.json", "ghcr.io")


def test_settings_credentials_come_first_and_may_be_limited_to_one_host(tmp_path: Path) -> None:
    path = docker_config(tmp_path, {"ghcr.io": {"auth": auth("from-docker", "pw")}})
    settings = Settings(registry_username="alice", registry_password=SecretStr(PASSWORD))
    store = CredentialStore.from_settings(settings)
    store = CredentialStore(store.configured, store.only_host, path)
    chosen = store.for_registry("ghcr.io")
    assert chosen is not None and chosen.username == "alice" and chosen.source == SETTINGS_SOURCE

    limited = CredentialStore(store.configured, "registry.example.com", path)
    fallback = limited.for_registry("ghcr.io")
    assert fallback is not None and fallback.username == "from-docker"
    assert limited.for_registry("quay.io") is None


def test_half_set_settings_credentials_are_refused() -> None:
    with pytest.raises(CredentialsError, match="set both of CIRRUS_REGISTRY_USERNAME"):
        CredentialStore.from_settings(Settings(registry_username="alice"))


class Recorder(http.server.BaseHTTPRequestHandler):
    """The registry (`/v2/...`: redirects to `redirect_to`) or the host it redirects to (401, then a token)."""

    redirect_to = ""
    seen: ClassVar[list[tuple[str, str | None]]] = []

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization")))
        host = "127.0.0.1:{}".format(self.headers.get("Host", "").rpartition(":")[2])
        if self.path.startswith("/v2/") and self.redirect_to:
            self._answer(307, {"Location": f"http://{self.redirect_to}/storage"})
        elif self.path.startswith("/token"):
            self._answer(200, {}, b'{"token": "storage-token"}')
        elif self.headers.get("Authorization") == "Bearer storage-token":
            self._answer(200, {}, b"{}")
        else:
            self._answer(401, {"WWW-Authenticate": f'Bearer realm="http://{host}/token",scope="x"'})

    def _answer(self, status: int, headers: dict[str, str], body: bytes = b"") -> None:
        self.send_response(status)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serving(handler: type[Recorder]) -> Iterator[str]:
    with http_server.serving(handler) as server:
        yield f"127.0.0.1:{server.server_address[1]}"


def test_credentials_never_go_to_a_host_the_registry_redirects_to() -> None:
    class Storage(Recorder):
        seen: ClassVar[list[tuple[str, str | None]]] = []

    class Registry(Recorder):
        seen: ClassVar[list[tuple[str, str | None]]] = []

    async def fetch(registry: str) -> int:
        login = Credentials("alice", PASSWORD, SETTINGS_SOURCE)
        auth = RegistryAuth(registry, "models/m", login, TokenCache(), "test pull")
        async with httpx.AsyncClient(base_url=f"http://{registry}", follow_redirects=True, auth=auth) as c:
            return (await c.get("/v2/models/m/manifests/v1")).status_code

    with serving(Storage) as storage, serving(Registry) as registry:
        Registry.redirect_to = storage
        with pytest.raises(AccessDenied):  # httpx drops the storage token on the redirect to another host
            asyncio.run(fetch(registry))
    token_requests = [auth for path, auth in Storage.seen if path.startswith("/token")]
    assert token_requests == [None], "the redirect target's token service is asked anonymously"
    assert Credentials("alice", PASSWORD, SETTINGS_SOURCE).basic() not in [auth for _, auth in Storage.seen]
