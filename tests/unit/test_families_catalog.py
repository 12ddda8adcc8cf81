"""The GLM and Kimi entries of the built-in catalog: valid, honestly not installed, sized per quantization, and
`cirrus models` telling whether this machine can hold each one."""

import json
import tomllib
from importlib.resources import files
from pathlib import Path

import pytest
from pydantic import ValidationError

from cirrus.api.workers_ai.models import model_record
from cirrus.catalog import load_catalog
from cirrus.catalog.footprint import BITS_PER_WEIGHT, GIB, fit, footprint, footprints
from cirrus.catalog.spec import ModelSpec
from cirrus.cli import main

GLM_FLASH = "@cf/zai-org/glm-4.7-flash"
KIMI = "@cf/moonshotai/kimi-k2.6"
GLM_9B = "@cf/zai-org/glm-4-9b-0414"
MOONLIGHT = "@cf/moonshotai/moonlight-16b-a3b-instruct"
LLAMA_CPP_ARCHITECTURES = {"glm4", "glm4moe", "chatglm", "deepseek2"}


def family_entries() -> list[ModelSpec]:
    raw = tomllib.loads(files("cirrus.catalog").joinpath("families.toml").read_text())
    return [ModelSpec.model_validate(entry) for entry in raw["models"]]


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty local store and state directory, so nothing packed elsewhere counts as installed."""
    monkeypatch.setenv("CIRRUS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CIRRUS_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("CIRRUS_MEMORY_BUDGET_BYTES", raising=False)
    monkeypatch.delenv("CIRRUS_CATALOG", raising=False)
    return tmp_path


def test_both_families_are_listed_with_their_workers_ai_figures() -> None:
    specs = {spec.id: spec for spec in family_entries()}
    assert {GLM_FLASH, KIMI, GLM_9B, MOONLIGHT, "@cf/thudm/glm-edge-1.5b-chat"} <= set(specs)
    flash, kimi = specs[GLM_FLASH], specs[KIMI]
    assert (flash.context_window, flash.pricing.input_per_million, flash.pricing.output_per_million) == (
        131072,
        0.06,
        0.40,
    )
    assert (kimi.context_window, kimi.pricing.input_per_million, kimi.pricing.output_per_million) == (
        262144,
        0.95,
        4.00,
    )
    assert (flash.family, kimi.family) == ("glm47", "kimi_k25")


@pytest.mark.parametrize("spec", family_entries(), ids=lambda spec: spec.id)
def test_every_family_entry_describes_itself_and_says_how_to_pack_it(spec: ModelSpec) -> None:
    assert spec.architecture in LLAMA_CPP_ARCHITECTURES
    assert spec.parameters is not None
    assert spec.active_parameters is None or spec.active_parameters < spec.parameters
    assert spec.artifact.store is not None and spec.artifact.store.startswith(f"{spec.id}:")
    quant = spec.artifact.store.rpartition(":")[2]
    assert "cirrus pack " in spec.install_hint
    # packing it as the hint says makes this very entry installed
    assert f"--id {spec.id} --quant {quant}" in spec.install_hint


def test_family_entries_are_not_installed_in_an_empty_store(tmp_path: Path) -> None:
    catalog = load_catalog(None, tmp_path)
    family_ids = {spec.id for spec in family_entries()}
    states = {entry.spec.id: entry.installed for entry in catalog.entries() if entry.spec.id in family_ids}
    assert states and not any(states.values())


def test_footprints_shrink_with_fewer_bits() -> None:
    for spec in family_entries():
        totals = [f.total for f in footprints(spec)]
        assert [f.quant for f in footprints(spec)] == list(BITS_PER_WEIGHT)
        assert totals == sorted(totals, reverse=True) and len(set(totals)) == len(totals)


def test_glm_4_9b_footprint_matches_the_hand_computed_figures() -> None:
    spec = {spec.id: spec for spec in family_entries()}[GLM_9B]
    at_q4 = footprint(spec, "Q4_K_M")
    assert at_q4 is not None
    # 9.4e9 weights x (4.58 GiB x 2**30 x 8 bits / 8,030,261,248 Llama-3-8B weights) / 8 bits
    assert at_q4.weights == pytest.approx(5_756_566_514, abs=2)
    assert at_q4.kv_cache == 40 * 2 * (128 + 128) * 2 * 8192 == 335_544_320  # 8192 cells of f16 K and V
    assert at_q4.total == pytest.approx(5_756_566_514 + 335_544_320 + 112 * 2**20, abs=2)
    at_f16 = footprint(spec, "F16")
    assert at_f16 is not None and at_f16.weights == 18_800_000_000  # two bytes a weight


def test_an_entry_without_a_parameter_count_has_no_footprint(tmp_path: Path) -> None:
    spec = ModelSpec(id="@cf/me/mine", artifact={"path": "/nowhere.gguf"})  # type: ignore[arg-type]
    assert footprint(spec, "Q4_K_M") is None and footprints(spec) == [] and fit(spec, GIB) is None


def test_fit_picks_the_packed_quant_then_smaller_ones_then_says_too_large() -> None:
    specs = {spec.id: spec for spec in family_entries()}
    roomy = fit(specs[GLM_9B], 8 * GIB)
    assert roomy is not None and roomy.fits
    assert roomy.describe().startswith("fits at Q4_K_M (5.8 GiB of a 8.0 GiB budget)")
    tight = fit(specs[MOONLIGHT], int(7.5 * GIB))
    assert tight is not None and tight.fits and tight.footprint.quant == "Q2_K"
    assert tight.describe().startswith("fits only at Q2_K, not Q4_K_M")
    huge = fit(specs[KIMI], 8 * GIB)
    assert huge is not None and not huge.fits
    assert huge.describe().startswith("too large for this machine: needs 369.7 GiB even at Q2_K")


def test_more_active_than_total_parameters_is_refused() -> None:
    with pytest.raises(ValidationError, match="active_parameters"):
        ModelSpec(
            id="@cf/me/mine",
            artifact={"path": "/nowhere.gguf"},  # type: ignore[arg-type]
            parameters=3.0,
            active_parameters=16.0,
        )


def status_lines(output: str) -> dict[str, str]:
    return {line.split()[0]: line for line in output.splitlines()[1:] if line.startswith("@")}


def test_cirrus_models_says_what_fits_a_given_budget(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["models", "--memory-budget-bytes", str(8 * GIB)]) == 0
    output = capsys.readouterr().out
    rows = status_lines(output)
    assert "not installed: fits at Q4_K_M (5.8 GiB of a 8.0 GiB budget)" in rows[GLM_9B]
    assert "not installed: too large for this machine: needs 369.7 GiB even at Q2_K" in rows[KIMI]
    assert "    install: hf download zai-org/GLM-4-9B-0414" in output


def test_cirrus_models_reads_the_budget_from_the_environment(
    isolated: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CIRRUS_MEMORY_BUDGET_BYTES", str(4 * GIB))
    assert main(["models"]) == 0
    rows = status_lines(capsys.readouterr().out)
    assert "fits only at Q2_K, not Q4_K_M" in rows[GLM_9B]  # 5.8 GiB at Q4_K_M is over 4 GiB
    assert "fits at Q4_K_M" in rows["@cf/thudm/glm-edge-1.5b-chat"]


def test_cirrus_models_json(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "--json", "--memory-budget-bytes", str(8 * GIB)]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing["memory_budget_bytes"] == 8 * GIB
    models = {model["id"]: model for model in listing["models"]}
    glm = models[GLM_9B]
    assert (glm["installed"], glm["architecture"], glm["parameters"]) == (False, "glm4", 9.4)
    assert glm["memory"]["fits"] and glm["memory"]["quant"] == "Q4_K_M" and glm["memory"]["kv_cache_counted"]
    assert list(glm["footprints"]) == list(BITS_PER_WEIGHT)
    assert models[KIMI]["memory"]["fits"] is False and models[KIMI]["active_parameters"] == 32.0


def test_the_models_search_record_carries_the_description_fields(tmp_path: Path) -> None:
    entry = next(e for e in load_catalog(None, tmp_path).entries() if e.spec.id == MOONLIGHT)
    properties = {p["property_id"]: p["value"] for p in model_record(entry)["properties"]}
    assert properties["installed"] == "false"
    assert (properties["architecture"], properties["family"]) == ("deepseek2", "kimi_k2")
    assert (properties["parameters_billions"], properties["active_parameters_billions"]) == ("16.0", "3.0")


def test_glm_4_0414_speaks_the_glm4_family_and_glm_edge_its_own_template() -> None:
    specs = {spec.id: spec for spec in family_entries()}
    assert specs[GLM_9B].family == "glm4"
    assert specs["@cf/thudm/glm-edge-1.5b-chat"].family is None  # no `[gMASK]<sop>`, no tools in its template
    assert specs["@cf/zai-org/glm-4.5-air"].family == "glm45"  # the later GLMs keep their own format
