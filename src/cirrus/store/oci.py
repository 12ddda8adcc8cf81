"""GGUF models as OCI artifacts, laid out the way Docker Model Runner lays them out, so its tools read ours.

Media types, from Docker's model specification (github.com/docker/model-spec, spec.md and config.md) and the
constants Docker Model Runner's own code uses (github.com/docker/model-distribution, types/config.go):
the manifest's config is `application/vnd.docker.ai.model.config.v0.1+json`, the weights are one uncompressed
layer of type `application/vnd.docker.ai.gguf.v3`. Cirrus's own artifact manifest rides in the config JSON
under the key "cirrus", which Docker's readers ignore.
"""

import ipaddress
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

OCI_MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
MODEL_CONFIG_MEDIA_TYPE = "application/vnd.docker.ai.model.config.v0.1+json"
MODEL_CONFIG_PREFIX = "application/vnd.docker.ai.model.config."  # later versions of the config keep it
GGUF_MEDIA_TYPE = "application/vnd.docker.ai.gguf.v3"
CIRRUS_KEY = "cirrus"

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# registry/name[:tag][@digest]; the registry is required (it has a dot or a port, or is "localhost").
REFERENCE = re.compile(
    r"^(?P<registry>(?:[A-Za-z0-9.-]+\.[A-Za-z0-9.-]+|localhost|\[[0-9a-fA-F:]+\])(?::\d+)?|[A-Za-z0-9.-]+:\d+)"
    r"/(?P<repository>[a-z0-9]+(?:[._-]+[a-z0-9]+)*(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[0-9a-f]{64}))?$"
)


class RegistryError(Exception):
    """A push or pull that failed; the message is the one line a user reads."""


class RegistryUnreachable(RegistryError):
    pass


class NotARegistry(RegistryError):
    """Something answered, but not the OCI distribution API."""


class ReferenceNotFound(RegistryError):
    pass


class DigestMismatch(RegistryError):
    pass


class InvalidArtifact(RegistryError):
    """A bad reference, or a manifest that does not describe a GGUF model."""


@dataclass(frozen=True)
class Reference:
    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, text: str) -> "Reference":
        match = REFERENCE.match(text.strip())
        if match is None:
            raise InvalidArtifact(
                f"{text!r} is not an OCI reference like 127.0.0.1:5000/models/smollm2:q4_1 "
                "(a registry host, a lower-case repository, then :tag or @sha256:digest)"
            )
        tag, digest = match["tag"], match["digest"]
        return cls(match["registry"], match["repository"], tag if tag or digest else "latest", digest)

    @property
    def version(self) -> str:
        """What the manifest endpoint is asked for: the digest when there is one, else the tag."""
        return self.digest or self.tag or "latest"

    def manifest_path(self) -> str:
        return f"/v2/{self.repository}/manifests/{self.version}"

    def blob_path(self, digest: str) -> str:
        return f"/v2/{self.repository}/blobs/{digest}"

    def base_url(self, insecure: bool = False) -> str:
        host = DOCKER_HUB_API if self.registry in DOCKER_HUB_NAMES else self.registry
        return f"{'http' if insecure or is_loopback(self.registry) else 'https'}://{host}"

    def __str__(self) -> str:
        tag = f":{self.tag}" if self.tag else ""
        digest = f"@{self.digest}" if self.digest else ""
        return f"{self.registry}/{self.repository}{tag}{digest}"


# `docker.io/library/x` names Docker Hub, whose registry API answers on another host.
DOCKER_HUB_NAMES = frozenset({"docker.io", "index.docker.io"})
DOCKER_HUB_API = "registry-1.docker.io"


def is_loopback(registry: str) -> bool:
    """Registries on this machine speak plain HTTP, as Docker assumes for them too."""
    bracketed = registry.startswith("[")  # [IPv6]:port
    host = registry[1 : registry.find("]")] if bracketed else registry.rsplit(":", 1)[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str
    size: int

    @classmethod
    def from_json(cls, raw: object, what: str) -> "Descriptor":
        if not isinstance(raw, dict):
            raise InvalidArtifact(f"the manifest's {what} is not a descriptor object")
        media_type, digest, size = raw.get("mediaType"), raw.get("digest"), raw.get("size")
        if not isinstance(media_type, str) or not isinstance(size, int) or size < 0:
            raise InvalidArtifact(f"the manifest's {what} lacks a media type or a size")
        if not isinstance(digest, str) or not DIGEST.match(digest):
            raise InvalidArtifact(f"the manifest's {what} has digest {digest!r}, not sha256:<64 hex>")
        return cls(media_type, digest, size)


def config_descriptor(manifest: dict[str, Any]) -> Descriptor:
    config = Descriptor.from_json(manifest.get("config"), "config")
    if not config.media_type.startswith(MODEL_CONFIG_PREFIX):
        raise InvalidArtifact(
            f"not a model artifact: its config has media type {config.media_type}, not {MODEL_CONFIG_MEDIA_TYPE}"
        )
    return config


def gguf_layer(manifest: dict[str, Any]) -> Descriptor:
    layers = manifest.get("layers")
    if not isinstance(layers, list):
        raise InvalidArtifact("the manifest has no layers")
    ggufs = [
        layer for layer in layers if isinstance(layer, dict) and layer.get("mediaType") == GGUF_MEDIA_TYPE
    ]
    if len(ggufs) != 1:
        raise InvalidArtifact(f"the artifact has {len(ggufs)} layers of type {GGUF_MEDIA_TYPE}, not one")
    return Descriptor.from_json(ggufs[0], "GGUF layer")


def model_config(artifact: dict[str, Any], created: datetime | None = None) -> dict[str, Any]:
    """The config blob: Docker's model config fields, plus Cirrus's artifact manifest under "cirrus".

    `artifact` needs "digest" and "size"; "architecture", "quantization", "parameters" and "context_window" are
    copied into Docker's fields when present.
    """
    digest, size = artifact["digest"], int(artifact["size"])
    when = (created or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    described = {
        key: str(artifact[name])
        for key, name in (
            ("architecture", "architecture"),
            ("quantization", "quantization"),
            ("parameters", "parameters"),
        )
        if artifact.get(name)
    }
    config: dict[str, Any] = {"format": "gguf", "format_version": "3", **described, "size": str(size)}
    # config.md puts these under "gguf" (with parameter_count); Docker's Go reader reads them at the top.
    config["gguf"] = {("parameter_count" if k == "parameters" else k): v for k, v in described.items()}
    if artifact.get("context_window"):
        config["context_size"] = int(artifact["context_window"])
    return {
        "config": config,
        "descriptor": {"createdAt": when, "created": when},
        "rootfs": {"type": "rootfs", "diff_ids": [digest]},
        "files": [{"diffID": digest, "type": GGUF_MEDIA_TYPE}],
        CIRRUS_KEY: artifact,
    }
