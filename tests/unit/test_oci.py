"""OCI model artifacts: references, Docker Model Runner's media types, the config blob, manifest checks."""

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from cirrus.catalog.spec import ArtifactRef
from cirrus.store.oci import (
    GGUF_MEDIA_TYPE,
    MODEL_CONFIG_MEDIA_TYPE,
    InvalidArtifact,
    Reference,
    config_descriptor,
    gguf_layer,
    is_loopback,
    model_config,
)
from cirrus.store.pull import resumed_at

DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32


def manifest(config_type: str = MODEL_CONFIG_MEDIA_TYPE, layers: list[Any] | None = None) -> dict[str, Any]:
    return {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": config_type, "digest": OTHER, "size": 120},
        "layers": [{"mediaType": GGUF_MEDIA_TYPE, "digest": DIGEST, "size": 1000}]
        if layers is None
        else layers,
    }


def test_media_types_are_docker_model_runners() -> None:
    assert MODEL_CONFIG_MEDIA_TYPE == "application/vnd.docker.ai.model.config.v0.1+json"
    assert GGUF_MEDIA_TYPE == "application/vnd.docker.ai.gguf.v3"


@pytest.mark.parametrize(
    ("text", "registry", "repository", "tag", "digest"),
    [
        ("127.0.0.1:5000/models/smollm2:q4_1", "127.0.0.1:5000", "models/smollm2", "q4_1", None),
        ("localhost/smollm2", "localhost", "smollm2", "latest", None),
        ("ghcr.io/org/team/model:v1.0", "ghcr.io", "org/team/model", "v1.0", None),
        (f"registry.example.com:443/m@{DIGEST}", "registry.example.com:443", "m", None, DIGEST),
    ],
)
def test_reference_parses(
    text: str, registry: str, repository: str, tag: str | None, digest: str | None
) -> None:
    ref = Reference.parse(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (registry, repository, tag, digest)
    assert Reference.parse(str(ref)) == ref


@pytest.mark.parametrize(
    "text",
    [
        "smollm2:q4_1",
        "127.0.0.1:5000/Models/UPPER",
        "127.0.0.1:5000/m:bad tag",
        "127.0.0.1:5000/m@sha256:short",
        "",
    ],
)
def test_reference_refuses_bad_text(text: str) -> None:
    with pytest.raises(InvalidArtifact, match="is not an OCI reference"):
        Reference.parse(text)


def test_loopback_registries_speak_plain_http() -> None:
    assert is_loopback("127.0.0.1:5000") and is_loopback("localhost:5000") and is_loopback("[::1]:5000")
    assert not is_loopback("ghcr.io") and not is_loopback("10.0.0.1:5000")
    assert Reference.parse("127.0.0.1:5000/m:t").base_url() == "http://127.0.0.1:5000"
    assert Reference.parse("ghcr.io/o/m:t").base_url() == "https://ghcr.io"
    assert Reference.parse("ghcr.io/o/m:t").base_url(insecure=True) == "http://ghcr.io"
    ref = Reference.parse(f"127.0.0.1:5000/models/m@{DIGEST}")
    assert ref.manifest_path() == f"/v2/models/m/manifests/{DIGEST}"
    assert ref.blob_path(OTHER) == f"/v2/models/m/blobs/{OTHER}"


def test_model_config_follows_the_model_spec_and_carries_the_artifact_manifest() -> None:
    artifact = {"digest": DIGEST, "size": 1000, "architecture": "llama", "quantization": "Q4_1"}
    artifact |= {"parameters": "135M", "context_window": 8192, "model_id": "@cf/x/y"}
    config = model_config(artifact, created=datetime(2025, 1, 2, tzinfo=UTC))
    assert config["config"]["format"] == "gguf" and config["config"]["size"] == "1000"
    assert config["config"]["quantization"] == "Q4_1" and config["config"]["context_size"] == 8192
    assert config["config"]["gguf"] == {
        "architecture": "llama",
        "quantization": "Q4_1",
        "parameter_count": "135M",
    }
    assert config["files"] == [{"diffID": DIGEST, "type": GGUF_MEDIA_TYPE}]
    assert config["rootfs"] == {"type": "rootfs", "diff_ids": [DIGEST]}
    assert config["descriptor"]["createdAt"] == "2025-01-02T00:00:00Z"
    assert config["cirrus"] is artifact


def test_manifest_checks_find_the_gguf_layer_and_config() -> None:
    good = manifest()
    assert gguf_layer(good).digest == DIGEST and gguf_layer(good).size == 1000
    assert config_descriptor(good).digest == OTHER


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (manifest(config_type="application/vnd.oci.image.config.v1+json"), "not a model artifact"),
        (manifest(layers=[]), "0 layers"),
        (manifest(layers=[{"mediaType": GGUF_MEDIA_TYPE, "digest": "md5:00", "size": 1}]), "not sha256"),
        (manifest(layers=[{"mediaType": GGUF_MEDIA_TYPE, "digest": DIGEST}]), "lacks a media type or a size"),
        ({"layers": "nope", "config": {}}, "no layers|not a descriptor|lacks"),
    ],
)
def test_manifest_checks_refuse_what_is_not_a_gguf_model(bad: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArtifact, match=message):
        config_descriptor(bad)
        gguf_layer(bad)


def test_catalog_accepts_an_oci_artifact_and_refuses_a_bad_reference() -> None:
    ref = ArtifactRef(oci="127.0.0.1:5000/models/smollm2:q4_1")
    assert ref.describe() == "OCI artifact 127.0.0.1:5000/models/smollm2:q4_1"
    with pytest.raises(ValidationError, match="not an OCI reference"):
        ArtifactRef(oci="not a reference")
    with pytest.raises(ValidationError, match="exactly one of"):
        ArtifactRef(oci="127.0.0.1:5000/m:t", path="/x.gguf")


def test_docker_hub_names_reach_its_registry_api_host() -> None:
    assert Reference.parse("docker.io/ai/smollm2:latest").base_url() == "https://registry-1.docker.io"
    assert Reference.parse("ghcr.io/org/model:q4").base_url() == "https://ghcr.io"
    assert Reference.parse("127.0.0.1:5000/models/x:q4").base_url() == "http://127.0.0.1:5000"


@pytest.mark.parametrize(
    ("offset", "status", "content_range", "starts"),
    [
        (1000, 206, "bytes 1000-1999/2000", 1000),
        (1000, 206, "bytes 1000-1999/*", 1000),
        (1000, 206, "bytes 0-1999/2000", None),  # a part, but not the one asked for: never appended
        (1000, 206, None, None),
        (1000, 200, None, 0),  # the Range was ignored: the whole blob
        (0, 200, None, 0),
    ],
)
def test_a_resumed_download_appends_only_a_part_that_starts_where_it_stopped(
    offset: int, status: int, content_range: str | None, starts: int | None
) -> None:
    assert resumed_at(offset, status, content_range) == starts
