"""Where registry credentials come from: Cirrus's settings (CIRRUS_REGISTRY_USERNAME / CIRRUS_REGISTRY_PASSWORD),
else the user's Docker config (`auths[host].auth`, as `docker login` writes it).

A password never appears in a repr, a log line or an error message; errors name only where it came from.
"""

import base64
import binascii
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cirrus.config import Settings
from cirrus.store.oci import RegistryError

SETTINGS_SOURCE = "CIRRUS_REGISTRY_USERNAME/CIRRUS_REGISTRY_PASSWORD"
# Docker Hub's credentials live under its old index address, whatever host a reference names.
DOCKER_HUB_HOSTS = {"docker.io", "index.docker.io", "registry-1.docker.io"}
DOCKER_HUB_KEY = "index.docker.io"


class CredentialsError(RegistryError):
    """Credentials that are configured but unusable (half set, or not decodable)."""


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)
    source: str  # where they came from, for error messages: a settings name or a file path

    def basic(self) -> str:
        """The value of an `Authorization: Basic` header."""
        pair = f"{self.username}:{self.password}".encode()
        return f"Basic {base64.b64encode(pair).decode()}"


def default_docker_config() -> Path:
    return Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker") / "config.json"


@dataclass(frozen=True)
class CredentialStore:
    """Credentials per registry host. Configured credentials go to `only_host` when it is set, else to the
    registry of the reference at hand (and its token service; never to a host it redirects to, see
    `registry_auth`); a host they do not cover falls back to the Docker config."""

    configured: Credentials | None = None
    only_host: str | None = None
    docker_config: Path | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> "CredentialStore":
        username = settings.registry_username
        password = settings.registry_password.get_secret_value() if settings.registry_password else None
        if (username is None) != (password is None):
            raise CredentialsError(f"set both of {SETTINGS_SOURCE}, or neither")
        configured = Credentials(username, password, SETTINGS_SOURCE) if username and password else None
        return cls(configured, settings.registry_host, default_docker_config())

    def with_login(self, username: str, password: str, source: str) -> "CredentialStore":
        """The same store with explicit credentials (from the command line) in front."""
        return CredentialStore(Credentials(username, password, source), None, self.docker_config)

    def for_registry(self, host: str) -> Credentials | None:
        if self.configured is not None and self.only_host in (None, host):
            return self.configured
        return docker_config_credentials(self.docker_config, host) if self.docker_config else None


def docker_config_credentials(path: Path, host: str) -> Credentials | None:
    """The `auths` entry for a host in a Docker config file; None when the file or the entry is missing.

    Credential helpers (`credsStore`, `credHelpers`) are not consulted.
    """
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise CredentialsError(f"{path} is not a readable Docker config: {type(exc).__name__}") from None
    auths = config.get("auths") if isinstance(config, dict) else None
    if not isinstance(auths, dict):
        return None
    wanted = _auth_key(host)
    for key, entry in auths.items():
        if isinstance(entry, dict) and _auth_key(str(key)) == wanted:
            return _entry_credentials(entry, f"{path} (auths[{key!r}])")
    return None


def _auth_key(address: str) -> str:
    """A registry host as `auths` keys name it: "ghcr.io", "https://index.docker.io/v1/", "127.0.0.1:5000"."""
    host = urlsplit(address).netloc if "://" in address else address.split("/", 1)[0]
    return DOCKER_HUB_KEY if host in DOCKER_HUB_HOSTS else host


def _entry_credentials(entry: dict[str, Any], source: str) -> Credentials | None:
    encoded = entry.get("auth")
    if isinstance(encoded, str) and encoded:
        try:
            username, sep, password = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise CredentialsError(f"{source}: its auth is not base64 of user:password") from None
        if not sep:
            raise CredentialsError(f"{source}: its auth is not base64 of user:password")
        return Credentials(username, password, source)
    plain_username, plain_password = entry.get("username"), entry.get("password")
    if isinstance(plain_username, str) and isinstance(plain_password, str) and plain_username:
        return Credentials(plain_username, plain_password, source)
    return None
