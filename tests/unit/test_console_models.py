"""The Models page's cards: install state, memory fit from the instance estimate or the catalog's figures,
instances by state, prices in USD and neurons, and packed variants with what their manifests record."""

from pathlib import Path

import pytest

from cirrus.catalog import ArtifactRef, Catalog, ModelSpec
from cirrus.catalog.spec import Pricing
from cirrus.console.pages.figures import size, usd
from cirrus.console.read_models.models import model_cards
from cirrus.store.local import LocalStore
from cirrus.store.manifest import Manifest, MemoryFigures, Provenance, Source

GIB = 2**30
DIGEST = "sha256:" + "ab" * 32


def manifest(model_id: str, quantization: str, evaluation: dict[str, object] | None) -> Manifest:
    return Manifest(
        model_id=model_id,
        task="text-generation",
        architecture="llama",
        quantization=quantization,
        size=100 * 2**20,
        digest=DIGEST,
        context_window=8192,
        memory=MemoryFigures(
            context_tokens=8192,
            weights_bytes=1,
            kv_cache_bytes=1,
            compute_bytes=1,
            process_bytes=1,
            total_bytes=300 * 2**20,
        ),
        chat_template=True,
        license=None,
        source=Source(kind="gguf", path="/m.gguf", digest=DIGEST, quantization="F16"),
        made=Provenance(versions={}, command=["cirrus", "pack"], created_at="2025-03-14T18:00:00Z", steps=[]),
        evaluation=evaluation,
    )


def write(store: LocalStore, item: Manifest) -> None:
    path = store.manifest_path(item.model_id, item.quantization)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(item.to_json())


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    (tmp_path / "small.gguf").write_bytes(b"GGUF")
    specs = [
        ModelSpec(
            id="@cf/test/small",
            artifact=ArtifactRef(path=str(tmp_path / "small.gguf")),
            pricing=Pricing(input_per_million=0.011, output_per_million=0.022),
        ),
        ModelSpec(
            id="@cf/test/huge", artifact=ArtifactRef(path=str(tmp_path / "absent.gguf")), parameters=400.0
        ),
        ModelSpec(
            id="@cf/test/mystery",
            task="text-embeddings",
            artifact=ArtifactRef(path=str(tmp_path / "no.gguf")),
        ),
    ]
    return Catalog(specs, tmp_path)


def test_cards_say_what_is_installed_what_fits_and_what_runs(catalog: Catalog, tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    known = {"@cf/test/small": (500 * 2**20, 100 * 2**20)}
    instances = [("@cf/test/small", "ready"), ("@cf/test/small", "ready"), ("@cf/test/small", "starting")]
    small, huge, mystery = model_cards(catalog, store, known, instances, budget=4 * GIB)

    assert (small.installed, small.fits, small.instances) == (True, True, {"ready": 2, "starting": 1})
    assert "500 MiB" in small.memory_note
    assert [(p.label, p.usd, round(p.neurons, 6)) for p in small.prices] == [
        ("input", 0.011, 1000.0),
        ("output", 0.022, 2000.0),
    ]
    assert (huge.installed, huge.fits, huge.instances) == (False, False, {})
    assert "too large" in huge.memory_note
    assert mystery.fits is None
    assert [p.label for p in mystery.prices] == ["input"]  # an embedding model has no output price


def test_packed_variants_carry_their_recorded_evaluation(catalog: Catalog, tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    evaluation = {
        "date": "2025-03-14",
        "perplexity": 18.2,
        "kl_mean": 0.012,
        "decode_tps": 210.0,
        "peak_rss_bytes": 2**29,
    }
    write(store, manifest("@cf/test/small", "Q8_0", evaluation))
    write(store, manifest("@cf/test/small", "Q4_0", None))
    broken = store.manifest_path("@cf/test/huge", "Q2_K")
    broken.parent.mkdir(parents=True)
    broken.write_text("{not json")

    small, huge, _ = model_cards(catalog, store, {}, [], budget=4 * GIB)

    q4, q8 = small.variants
    assert (q4.ref, q4.evaluation, q4.evaluated_on) == ("@cf/test/small:Q4_0", [], None)
    assert q8.evaluation == [
        ("perplexity", 18.2),
        ("KL mean", 0.012),
        ("decode tokens/s", 210.0),
        ("peak memory", 2**29),
    ]
    assert (q8.evaluated_on, q8.size_bytes, q8.memory_bytes) == ("2025-03-14", 100 * 2**20, 300 * 2**20)
    assert huge.variants == []  # an unreadable manifest is left out, not an error page


def test_figures_are_written_plainly() -> None:
    assert [usd(v) for v in (0, 4.7e-7, 0.5, 1234.5)] == ["$0", "$0.00000047", "$0.50", "$1,234.50"]
    assert [size(v) for v in (512, 3 * 2**20, 1.5 * GIB)] == ["512 B", "3.0 MiB", "1.5 GiB"]
