"""Pulls and pushes against a real registry (Distribution) that wants authentication: token auth against a
token service issuing real RS256 JWTs, and HTTP Basic against an htpasswd file."""

import asyncio
import base64
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cirrus.store.oci import Reference
from cirrus.store.pull import Puller
from cirrus.store.push import describe_gguf, push
from cirrus.store.registry_auth import AccessDenied
from cirrus.store.registry_credentials import Credentials, CredentialStore
from tests.integration.test_registry import assert_one_error_line, smollm2_gguf
from tests.services.registry import HtpasswdAuth, Registry, RegistryUnavailable, TokenAuth, running_registry
from tests.services.token_server import ISSUER, SERVICE, TokenService, running_token_service

pytestmark = pytest.mark.integration

USER, PASSWORD = "alice", "correct-horse-battery"
WRONG_PASSWORD = "wrong-staple-9f3k"
REPOSITORY = "models/smollm2"
STATUS = re.compile(r'HTTP/[\d.]+" (\d{3}) ')
NO_DOCKER_CONFIG = CredentialStore()  # neither settings nor a Docker config: anonymous


@dataclass(frozen=True)
class Secured:
    registry: Registry
    tokens: TokenService
    reference: str
    digest: str


def alice(source: str = "test") -> Credentials:
    return Credentials(USER, PASSWORD, source)


def push_as(credentials: Credentials | None, registry: Registry, tag: str) -> tuple[str, str]:
    reference = f"{registry.host}/{REPOSITORY}:{tag}"
    artifact = describe_gguf(smollm2_gguf(), {"model_id": "@cf/test/smollm2-auth"})
    push(smollm2_gguf(), Reference.parse(reference), artifact, credentials=credentials)
    return reference, artifact["digest"]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    folder = tmp_path_factory.mktemp("token-service")
    with running_token_service(folder, {USER: PASSWORD}, anonymous_actions=["pull"]) as tokens:
        auth = TokenAuth(tokens.realm, SERVICE, ISSUER, tokens.key.certificate)
        with running_registry(auth) as registry:
            reference, digest = push_as(alice(), registry, "q4_1")
            yield Secured(registry, tokens, reference, digest)


def cirrus(tmp_path: Path, *args: str, stdin: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "CIRRUS_CACHE_DIR": str(tmp_path / "cache"), "HOME": str(tmp_path), **env}
    environment.pop("DOCKER_CONFIG", None)
    command = [sys.executable, "-m", "cirrus.cli", *args]
    return subprocess.run(
        command, input=stdin, capture_output=True, text=True, env=environment, timeout=120, check=False
    )


def assert_no_secret(result: subprocess.CompletedProcess[str], secret: str) -> None:
    encoded = base64.b64encode(f"{USER}:{secret}".encode()).decode()
    for text in (result.stdout, result.stderr):
        assert secret not in text and encoded not in text


def test_push_with_credentials_asked_for_a_push_token(secured: Secured) -> None:
    def wants_push(scope: str) -> bool:
        return "push" in scope.rpartition(":")[2].split(",")  # Distribution lists the actions in any order

    pushes = [r for r in secured.tokens.requests if any(wants_push(s) for s in r.scopes)]
    assert pushes and all(r.user == USER and not r.refused for r in pushes), secured.tokens.requests
    assert secured.registry.blob_data(secured.digest).read_bytes() == smollm2_gguf().read_bytes()


def test_anonymous_pull_asks_for_one_token_for_the_manifest_and_both_blobs(
    secured: Secured, tmp_path: Path
) -> None:
    before, logged = len(secured.tokens.requests), len(secured.registry.access_log())

    pulled = asyncio.run(Puller(tmp_path / "store", NO_DOCKER_CONFIG).pull(secured.reference))

    assert pulled.path.read_bytes() == smollm2_gguf().read_bytes()
    [request] = secured.tokens.requests[before:]
    assert request.user is None and request.scopes == [f"repository:{REPOSITORY}:pull"]
    # The manifest's first GET is challenged; its retry and both blob GETs carry the token from the start.
    statuses = [m[1] for line in secured.registry.access_log()[logged:] if (m := STATUS.search(line))]
    assert statuses == ["401", "200", "200", "200"]


def test_a_cached_token_serves_the_next_pull_too(secured: Secured, tmp_path: Path) -> None:
    async def twice() -> None:
        puller = Puller(tmp_path / "store", NO_DOCKER_CONFIG)
        await puller.pull(secured.reference)
        (tmp_path / "store").rename(tmp_path / "first")  # so the second pull downloads again
        await puller.pull(secured.reference)

    before = len(secured.tokens.requests)
    asyncio.run(twice())
    assert len(secured.tokens.requests[before:]) == 1
    assert (tmp_path / "store" / "blobs" / "sha256" / secured.digest.removeprefix("sha256:")).is_file()


def test_anonymous_access_refused_by_the_token_service_is_one_clear_error(
    secured: Secured, tmp_path: Path
) -> None:
    secured.tokens.anonymous_actions = []
    try:
        with pytest.raises(AccessDenied, match="refused anonymous access; set CIRRUS_REGISTRY_USERNAME"):
            asyncio.run(Puller(tmp_path / "store", NO_DOCKER_CONFIG).pull(secured.reference))
        result = cirrus(tmp_path, "pull", secured.reference)
        assert_one_error_line(result, "refused anonymous access")
    finally:
        secured.tokens.anonymous_actions = ["pull"]


def test_wrong_credentials_fail_in_one_line_that_holds_no_secret(secured: Secured, tmp_path: Path) -> None:
    env = {"CIRRUS_REGISTRY_USERNAME": USER, "CIRRUS_REGISTRY_PASSWORD": WRONG_PASSWORD}
    pulled = cirrus(tmp_path, "pull", secured.reference, **env)
    assert_one_error_line(pulled, "refused the credentials from CIRRUS_REGISTRY_USERNAME")
    assert_no_secret(pulled, WRONG_PASSWORD)
    assert secured.tokens.requests[-1].user == USER and secured.tokens.requests[-1].refused

    login = ("--username", USER, "--password-stdin")
    pushed = cirrus(tmp_path, "push", str(smollm2_gguf()), secured.reference, *login, stdin=WRONG_PASSWORD)
    assert_one_error_line(pushed, "refused the credentials from --username/--password-stdin")
    assert_no_secret(pushed, WRONG_PASSWORD)


def test_anonymous_push_is_refused(secured: Secured) -> None:
    with pytest.raises(AccessDenied, match="refused anonymous access"):
        push_as(None, secured.registry, "anonymous")


def test_cli_pulls_with_settings_credentials_and_with_the_docker_config(
    secured: Secured, tmp_path: Path
) -> None:
    env = {"CIRRUS_REGISTRY_USERNAME": USER, "CIRRUS_REGISTRY_PASSWORD": PASSWORD}
    result = cirrus(tmp_path / "settings", "pull", secured.reference, **env)
    assert result.returncode == 0, result.stderr
    assert secured.tokens.requests[-1].user == USER and not secured.tokens.requests[-1].refused
    assert_no_secret(result, PASSWORD)

    home = tmp_path / "docker"
    auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    (home / ".docker").mkdir(parents=True)
    (home / ".docker" / "config.json").write_text(
        json.dumps({"auths": {secured.registry.host: {"auth": auth}}})
    )
    result = cirrus(home, "pull", secured.reference)
    assert result.returncode == 0, result.stderr
    assert secured.tokens.requests[-1].user == USER
    assert (
        Path(result.stdout.splitlines()[0].rsplit(" to ", 1)[1]).read_bytes() == smollm2_gguf().read_bytes()
    )


@pytest.fixture(scope="module")
def basic_registry() -> Iterator[Registry]:
    try:
        auth = HtpasswdAuth({USER: PASSWORD})
        with running_registry(auth) as registry:
            yield registry
    except RegistryUnavailable as exc:
        pytest.skip(str(exc))


def test_basic_auth_push_and_pull(basic_registry: Registry, tmp_path: Path) -> None:
    reference, _ = push_as(alice(), basic_registry, "basic")

    credentials = CredentialStore(alice("settings"))
    pulled = asyncio.run(Puller(tmp_path / "store", credentials).pull(reference))
    assert pulled.path.read_bytes() == smollm2_gguf().read_bytes()

    with pytest.raises(AccessDenied, match="wants credentials"):
        asyncio.run(Puller(tmp_path / "anonymous", NO_DOCKER_CONFIG).pull(reference))
    wrong = CredentialStore(Credentials(USER, WRONG_PASSWORD, "settings"))
    with pytest.raises(AccessDenied, match="refused the credentials from settings") as refused:
        asyncio.run(Puller(tmp_path / "wrong", wrong).pull(reference))
    assert WRONG_PASSWORD not in str(refused.value)
