"""A real OCI registry for tests: Debian's `docker-registry` (CNCF Distribution 2.8) on 127.0.0.1; no auth by
default, else htpasswd (HTTP Basic) or token auth against a token service (`tests.services.token_server`).

Its access log (one line per request, Apache combined format) goes to `log_path`, so tests can count the
requests it served and see their status codes (206 for a Range request).
"""

import subprocess
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.services.processes import free_port, stop

EXECUTABLE = Path("/usr/bin/docker-registry")
STARTUP_TIMEOUT_S = 15.0
PORT_ATTEMPTS = 3  # another process may take the free port between our probe and the registry's bind

CONFIG = """\
version: 0.1
log:
  level: warn
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
  secret: cirrus-tests
"""


@dataclass(frozen=True)
class HtpasswdAuth:
    """HTTP Basic against an htpasswd file; Distribution reads bcrypt hashes only."""

    users: dict[str, str]

    def config(self, folder: Path) -> str:
        path = folder / "htpasswd"
        path.write_text("".join(f"{user}:{bcrypt(password)}\n" for user, password in self.users.items()))
        return f"auth:\n  htpasswd:\n    realm: cirrus-test\n    path: {path}\n"


def bcrypt(password: str) -> str:
    """A bcrypt hash from the C library's crypt(3) (libxcrypt); RegistryUnavailable where it has none."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt

        hashed = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))
    if not hashed or not hashed.startswith("$2"):
        raise RegistryUnavailable("this C library's crypt(3) makes no bcrypt hashes, which htpasswd needs")
    return hashed


@dataclass(frozen=True)
class TokenAuth:
    """Bearer tokens from a token service, whose certificate the registry trusts."""

    realm: str
    service: str
    issuer: str
    certificate: Path

    def config(self, folder: Path) -> str:
        return (
            f"auth:\n  token:\n    realm: {self.realm}\n    service: {self.service}\n"
            f"    issuer: {self.issuer}\n    rootcertbundle: {self.certificate}\n"
        )


class RegistryUnavailable(RuntimeError):
    pass


@dataclass(frozen=True)
class Registry:
    host: str  # "127.0.0.1:PORT", the registry part of a reference
    storage_root: Path
    log_path: Path

    def blob_data(self, digest: str) -> Path:
        """Where Distribution's filesystem driver keeps a blob's bytes."""
        algorithm, hexdigest = digest.split(":", 1)
        return self.storage_root / "docker/registry/v2/blobs" / algorithm / hexdigest[:2] / hexdigest / "data"

    def access_log(self) -> list[str]:
        return [line for line in self.log_path.read_text(errors="replace").splitlines() if '"GET ' in line]

    def blob_gets(self, digest: str) -> list[str]:
        """Access-log lines of GET requests for this blob (the status code follows the quoted request)."""
        return [line for line in self.access_log() if f"/blobs/{digest} " in line]


@contextmanager
def running_registry(auth: HtpasswdAuth | TokenAuth | None = None) -> Iterator[Registry]:
    """Start a fresh registry with its storage in a temporary folder; stop it (by pid) on exit."""
    if not EXECUTABLE.is_file():
        raise RegistryUnavailable(f"{EXECUTABLE} is missing (Debian: apt-get install docker-registry)")
    with tempfile.TemporaryDirectory(prefix="cirrus-registry-") as directory:
        folder = Path(directory)
        process, registry = _start(folder, auth.config(folder) if auth else "")
        try:
            yield registry
        finally:
            stop(process)


def _start(folder: Path, auth_config: str) -> tuple["subprocess.Popen[bytes]", Registry]:
    for _ in range(PORT_ATTEMPTS):
        port = free_port()
        registry = Registry(f"127.0.0.1:{port}", folder / "storage", folder / f"registry-{port}.log")
        config = folder / f"config-{port}.yml"
        config.write_text(CONFIG.format(root=registry.storage_root, port=port) + auth_config)
        with registry.log_path.open("ab") as log:
            process = subprocess.Popen(
                [str(EXECUTABLE), "serve", str(config)], stdout=log, stderr=subprocess.STDOUT
            )
        if _wait_until_ready(process, registry.host):
            return process, registry
        stop(process)
    raise RegistryUnavailable(
        f"docker-registry did not answer GET /v2/ within {STARTUP_TIMEOUT_S}s:\n"
        f"{registry.log_path.read_text(errors='replace')[-2000:]}"
    )


def _wait_until_ready(process: "subprocess.Popen[bytes]", host: str) -> bool:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"http://{host}/v2/", timeout=1).status_code in (200, 401):  # 401: it wants auth
                return True
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    return False
