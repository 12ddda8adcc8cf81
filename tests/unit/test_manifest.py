"""Manifests: their JSON form, and the local store's index by model id and quantization."""

import json
from pathlib import Path
from typing import Any

import pytest

from cirrus.store.blobs import BlobNotFound
from cirrus.store.local import LocalStore, ManifestNotFound
from cirrus.store.manifest import Manifest, ManifestError, split_ref

MODEL = "@cf/test/tiny"


def manifest_fields(digest: str, size: int, quantization: str = "Q8_0") -> dict[str, Any]:
    return {
        "model_id": MODEL,
        "task": "text-generation",
        "architecture": "llama",
        "quantization": quantization,
        "size": size,
        "digest": digest,
        "context_window": 2048,
        "memory": {
            "context_tokens": 2048,
            "weights_bytes": size,
            "kv_cache_bytes": 1,
            "compute_bytes": 2,
            "process_bytes": 3,
            "total_bytes": size + 6,
        },
        "chat_template": True,
        "license": "apache-2.0",
        "source": {
            "kind": "gguf",
            "path": "/models/tiny.Q4_1.gguf",
            "digest": "sha256:" + "1" * 64,
            "quantization": "Q4_1",
            "requantized": True,
        },
        "made": {
            "versions": {"llama-cpp-python": "0.3.36"},
            "command": ["cirrus", "pack", "tiny.gguf"],
            "created_at": "2026-01-01T00:00:00+00:00",
            "steps": ["llama_model_quantize Q4_1 -> F16 (requantize)", "llama_model_quantize F16 -> Q8_0"],
            "note": "quantized from an F16 that was expanded from Q4_1",
        },
    }


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "store")


def stored(store: LocalStore, content: bytes, quantization: str = "Q8_0") -> Manifest:
    blob = store.blobs.write([content])
    manifest = Manifest.model_validate(manifest_fields(blob.digest, blob.size, quantization))
    store.put(manifest)
    return manifest


def test_json_round_trip_keeps_every_field() -> None:
    manifest = Manifest.model_validate(manifest_fields("sha256:" + "a" * 64, 10))
    again = Manifest.from_json(manifest.to_json(), "test")
    assert again == manifest
    assert again.evaluation is None
    assert again.ref == f"{MODEL}:Q8_0"
    assert json.loads(manifest.to_json())["source"]["requantized"] is True


def test_a_file_that_is_not_json_is_one_clear_error() -> None:
    with pytest.raises(ManifestError, match=r"^x\.json is not a Cirrus manifest: the document: Invalid JSON"):
        Manifest.from_json("[not json", "x.json")


def test_a_missing_field_is_named() -> None:
    fields = manifest_fields("sha256:" + "a" * 64, 10)
    del fields["digest"]
    with pytest.raises(ManifestError, match="digest: Field required"):
        Manifest.from_json(json.dumps(fields), "x.json")


@pytest.mark.parametrize("model_id", ["@cf/../etc", "@cf/a/..", "cf/a/b", "@cf/a"])
def test_model_ids_that_could_escape_the_index_are_refused(model_id: str) -> None:
    fields = {**manifest_fields("sha256:" + "a" * 64, 10), "model_id": model_id}
    with pytest.raises(ManifestError, match="model_id"):
        Manifest.from_json(json.dumps(fields), "x.json")


def test_split_ref() -> None:
    assert split_ref("@cf/org/name:q4_k_m") == ("@cf/org/name", "Q4_K_M")
    with pytest.raises(ManifestError, match="not a model reference"):
        split_ref("@cf/org/name")


def test_the_store_indexes_manifests_by_id_and_quantization(store: LocalStore) -> None:
    q8 = stored(store, b"eight bits")
    q4 = stored(store, b"four bits", "Q4_0")
    assert store.get(MODEL, "q8_0") == q8
    assert store.resolve(f"{MODEL}:Q4_0") == q4
    assert store.resolve(str(store.manifest_path(MODEL, "Q4_0"))) == q4
    assert [m.quantization for m in store.manifests(MODEL)] == ["Q4_0", "Q8_0"]
    assert store.manifests("@cf/test/other") == []
    assert store.blob_path(q8).read_bytes() == b"eight bits"


def test_a_missing_variant_names_the_ones_that_exist(store: LocalStore) -> None:
    stored(store, b"eight bits")
    with pytest.raises(ManifestNotFound, match="packed variants of it: Q8_0"):
        store.get(MODEL, "Q2_K")
    with pytest.raises(ManifestNotFound, match="nothing is packed under that id"):
        store.resolve("@cf/test/other:Q8_0")


def test_a_manifest_needs_its_blob(store: LocalStore) -> None:
    orphan = Manifest.model_validate(manifest_fields("sha256:" + "b" * 64, 10))
    with pytest.raises(BlobNotFound):
        store.put(orphan)
    blob = store.blobs.write([b"12345"])
    wrong_size = Manifest.model_validate(manifest_fields(blob.digest, 6))
    with pytest.raises(ManifestError, match="holds 5 bytes, not 6"):
        store.put(wrong_size)
    assert store.manifests() == []


def test_the_evaluation_slot_is_filled_later(store: LocalStore) -> None:
    stored(store, b"eight bits")
    store.set_evaluation(MODEL, "Q8_0", {"kl_mean": 0.01, "reference": "F16"})
    assert store.get(MODEL, "Q8_0").evaluation == {"kl_mean": 0.01, "reference": "F16"}


def test_removing_a_manifest_keeps_the_blob(store: LocalStore) -> None:
    manifest = stored(store, b"eight bits")
    store.remove(MODEL, "Q8_0")
    assert store.manifests() == []
    assert store.blobs.has(manifest.digest)


EVIL_QUANTIZATION = "Q4/../../../../../../../../TMP/EVIL"


@pytest.mark.parametrize("quantization", [EVIL_QUANTIZATION, "q8_0", "Q8.0", ""])
def test_quantizations_that_could_escape_the_index_are_refused(quantization: str) -> None:
    with pytest.raises(ManifestError, match="quantization"):
        Manifest.from_json(json.dumps(manifest_fields("sha256:" + "a" * 64, 10, quantization)), "test")


def test_manifest_paths_stay_inside_the_manifests_folder(store: LocalStore) -> None:
    assert store.manifest_path(MODEL, "q8_0").name == "Q8_0.json"
    with pytest.raises(ManifestError, match="does not name a manifest inside"):
        store.manifest_path(MODEL, EVIL_QUANTIZATION)
