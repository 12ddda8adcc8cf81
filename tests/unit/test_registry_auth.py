"""Registry authentication's pure parts: challenges, the token cache, and where credentials come from."""

import base64
import json
from pathlib import Path

import pytest
from pydantic import SecretStr

from cirrus.config import Settings
from cirrus.store.registry_auth import Challenge, TokenCache
from cirrus.store.registry_credentials import (
    SETTINGS_SOURCE,
    Credentials,
    CredentialsError,
    CredentialStore,
    docker_config_credentials,
)

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
