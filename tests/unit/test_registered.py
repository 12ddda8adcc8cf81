"""Registered models: the models.toml file `cirrus models add` writes, and how it merges with a catalog."""

from pathlib import Path

import pytest

from cirrus.catalog import CatalogError, load_catalog
from cirrus.catalog.catalog import read_catalog
from cirrus.catalog.registered import Registered, RegistrationError, merge, read_registered, write_registered
from cirrus.catalog.spec import ModelSpec

SMOLLM = "@cf/huggingface/smollm2-135m-instruct"


def registered(model_id: str, replace: bool = False, task: str = "text-generation") -> Registered:
    spec = ModelSpec.model_validate(
        {
            "id": model_id,
            "task": task,
            "description": 'packed "quoted" \\ text, ünïcode',
            "artifact": {"path": "/store/blobs/sha256/" + "a" * 64},
            "context_window": 512,
            "kv_cache_tokens": 512,
        }
    )
    return Registered(spec, f"{model_id}:Q8_0", "sha256:" + "a" * 64, replace)


def test_the_file_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "state" / "models.toml"
    entries = [registered("@cf/me/one"), registered("@cf/me/two", replace=True, task="text-embeddings")]
    write_registered(path, entries)
    assert read_registered(path) == entries
    assert [p.name for p in path.parent.iterdir()] == ["models.toml"]


def test_no_file_means_no_registered_models(tmp_path: Path) -> None:
    assert read_registered(tmp_path / "models.toml") == []


def test_a_broken_file_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "models.toml"
    path.write_text('[[models]]\nid = "@cf/me/one"\nartifact = { path = "/x" }\n')
    with pytest.raises(RegistrationError, match=r"models.toml is invalid: .*registration"):
        read_registered(path)
    path.write_text(
        '[[models]]\nid = "nope"\nartifact = { path = "/x" }\nregistration = { artifact = "a", digest = "b" }\n'
    )
    with pytest.raises(RegistrationError, match=r"models\.toml is invalid: id: String should match pattern"):
        read_registered(path)


def test_registered_models_join_the_catalog(tmp_path: Path) -> None:
    path = tmp_path / "models.toml"
    write_registered(path, [registered("@cf/me/one")])
    catalog = load_catalog(None, tmp_path, registered=path)
    assert catalog.get("@cf/me/one").context_window == 512
    assert catalog.get(SMOLLM).context_window == 8192


def test_a_registered_id_shadows_a_catalog_id_only_when_allowed(tmp_path: Path) -> None:
    specs = read_catalog(None)
    with pytest.raises(RegistrationError, match="also in the catalog; register it again with --replace"):
        merge(specs, [registered(SMOLLM)], tmp_path / "models.toml")
    merged = merge(specs, [registered(SMOLLM, replace=True)], tmp_path / "models.toml")
    assert [spec.id for spec in merged] == [spec.id for spec in specs]
    assert next(spec for spec in merged if spec.id == SMOLLM).context_window == 512


def test_load_catalog_reports_a_shadowing_registration_as_a_catalog_error(tmp_path: Path) -> None:
    path = tmp_path / "models.toml"
    write_registered(path, [registered(SMOLLM)])
    with pytest.raises(CatalogError, match="also in the catalog"):
        load_catalog(None, tmp_path, registered=path)
