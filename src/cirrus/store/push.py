"""Push a GGUF file to an OCI registry as a Docker-Model-Runner-style model artifact, through the oras SDK."""

import json
import tempfile
from pathlib import Path
from typing import Any

import httpx
import oras.auth  # type: ignore[import-untyped]
import oras.auth.utils  # type: ignore[import-untyped]
import oras.client  # type: ignore[import-untyped]
import requests

from cirrus.store.blobs import sha256_file
from cirrus.store.gguf import FILE_TYPES, GGUFError, read_metadata
from cirrus.store.oci import (
    GGUF_MEDIA_TYPE,
    MODEL_CONFIG_MEDIA_TYPE,
    InvalidArtifact,
    NotARegistry,
    Reference,
    RegistryError,
    RegistryUnreachable,
    model_config,
)
from cirrus.store.registry_auth import HOW_TO_LOG_IN, AccessDenied
from cirrus.store.registry_credentials import Credentials

PROBE_TIMEOUT_S = 5.0


def describe_gguf(path: Path, given: dict[str, Any] | None = None) -> dict[str, Any]:
    """The artifact manifest for a GGUF: what its metadata says, then `given`'s fields, then its size and digest.

    A plain dict until `cirrus.store.manifest` lands; a `digest`/`sha256` in `given` must match the file.
    """
    try:
        metadata = read_metadata(path)
    except (GGUFError, OSError) as exc:
        raise InvalidArtifact(f"{path} is not a readable GGUF file: {exc}") from exc
    architecture = str(metadata.get("general.architecture", ""))
    found: dict[str, Any] = {
        "task": "text-generation",
        "architecture": architecture,
        "quantization": FILE_TYPES.get(int(str(metadata.get("general.file_type", -1))), "unknown"),
        "parameters": metadata.get("general.size_label"),
        "context_window": metadata.get(f"{architecture}.context_length"),
        "chat_template": "tokenizer.chat_template" in metadata,
        "license": metadata.get("general.license"),
    }
    artifact = {k: v for k, v in found.items() if v is not None} | dict(given or {})
    digest = sha256_file(path)
    claimed = artifact.pop("sha256", None) or artifact.get("digest")
    if claimed and claimed.removeprefix("sha256:") != digest.removeprefix("sha256:"):
        raise InvalidArtifact(f"the manifest says digest {claimed} but {path} has {digest}")
    return artifact | {"size": path.stat().st_size, "digest": digest}


def check_registry(reference: Reference, insecure: bool) -> None:
    """Fail fast, with one clear line, when nothing listens or what listens is no OCI registry.

    (oras retries a refused connection for about two minutes before it gives up.)
    """
    url = f"{reference.base_url(insecure)}/v2/"
    try:
        response = httpx.get(url, timeout=PROBE_TIMEOUT_S)
    except httpx.TransportError as exc:
        raise RegistryUnreachable(f"cannot reach the registry at {url}: {type(exc).__name__}: {exc}") from exc
    speaks_v2 = response.headers.get("Docker-Distribution-API-Version", "").startswith("registry/2")
    if response.status_code not in (200, 401) or not (speaks_v2 or "WWW-Authenticate" in response.headers):
        raise NotARegistry(f"{url} answered HTTP {response.status_code} but not as an OCI registry")


def push(
    gguf: Path,
    reference: Reference,
    artifact: dict[str, Any],
    insecure: bool = False,
    credentials: Credentials | None = None,
) -> None:
    """Upload the GGUF layer, the model config and the manifest. `artifact` comes from `describe_gguf`.

    Without `credentials`, oras answers a registry's 401 with the Docker config's (helpers included), else
    anonymously.
    """
    check_registry(reference, insecure)
    plain_http = reference.base_url(insecure).startswith("http:")
    client = oras.client.OrasClient(hostname=reference.registry, insecure=plain_http)
    auth = _install_auth(client, plain_http, credentials)
    with tempfile.TemporaryDirectory(prefix="cirrus-push-") as folder:
        # A link with a plain name: oras splits "path:media-type" at a colon, and names the layer after the file.
        layer = Path(folder) / (gguf.name if ":" not in gguf.name else "model.gguf")
        layer.symlink_to(gguf.resolve())
        config = Path(folder) / "config.json"
        config.write_text(json.dumps(model_config(artifact), sort_keys=True))
        try:
            client.push(
                target=str(reference),
                files=[f"{layer}:{GGUF_MEDIA_TYPE}"],
                manifest_config=f"{config}:{MODEL_CONFIG_MEDIA_TYPE}",
                disable_path_validation=True,
                quiet=True,
            )
        except _Refused:
            raise AccessDenied(f"pushing {reference}: {_refusal(credentials)}") from None
        except ValueError as exc:
            if auth.last_status in (401, 403):  # a token came, but without the push it needs
                raise AccessDenied(f"pushing {reference}: {_refusal(credentials)}") from None
            raise RegistryError(f"pushing {reference} failed: {exc}") from exc
        except requests.RequestException as exc:
            raise RegistryError(f"pushing {reference} failed: {exc}") from exc


class _TokenAuth(oras.auth.TokenAuth):  # type: ignore[misc]
    """oras's token backend, with three fixes: a challenge for another scope (push after a pull-only check)
    gets a new token, where oras would resend the one it has; a Basic challenge gets the credentials; and a 401
    it has no answer to fails at once."""

    _token_scope: str | None = None
    last_status: int | None = None  # of the last response the session received, to tell a refusal apart

    def record(self, response: requests.Response, *args: object, **kwargs: object) -> None:
        self.last_status = response.status_code

    def authenticate_request(
        self, original: requests.Response, headers: dict[str, str], refresh: bool = False
    ) -> tuple[dict[str, str], bool]:
        challenge = original.headers.get("Www-Authenticate", "")
        if challenge.lower().startswith("basic") and getattr(self, "_basic_auth", None):
            return {**headers, "Authorization": f"Basic {self._basic_auth}"}, True  # oras would want a token
        scope = oras.auth.utils.parse_auth_header(challenge).scope
        if scope != self._token_scope:
            refresh, self._token_scope = True, scope
        headers, changed = super().authenticate_request(original, headers, refresh)
        if not changed:  # oras's retry decorator would try four more times, for about two minutes
            raise _Refused()
        return headers, changed


class _Refused(oras.auth.AuthenticationException):  # type: ignore[misc]
    """Raised from inside oras, which lets this exception class through its retries."""


def _install_auth(client: Any, plain_http: bool, credentials: Credentials | None) -> _TokenAuth:
    """Install a `_TokenAuth` on an oras client, set up as `oras.auth.get_auth_backend` sets up its own."""
    auth = _TokenAuth()
    auth.session, auth.prefix, auth._tls_verify = client.session, "http" if plain_http else "https", True
    if credentials is not None:
        auth.set_basic_auth(credentials.username, credentials.password)
        # oras loads the Docker config on push (when none is loaded), and its entry would replace ours.
        auth._auth_config = {"auths": {}, "credsStore": None, "credHelpers": {}}
    client.auth = auth
    client.session.hooks["response"].append(auth.record)
    return auth


def _refusal(credentials: Credentials | None) -> str:
    if credentials is None:
        return f"the registry refused anonymous access or the Docker config's credentials; {HOW_TO_LOG_IN}"
    return f"the registry refused the credentials from {credentials.source}"
