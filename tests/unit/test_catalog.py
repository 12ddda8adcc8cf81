from pathlib import Path

import pytest

from cirrus.catalog import DEFAULT_MODEL, CatalogError, load_catalog
from cirrus.errors import ModelNotInstalled, NoSuchModel


def test_the_built_in_catalog_lists_the_default_and_the_second_model(tmp_path: Path) -> None:
    catalog = load_catalog(None, tmp_path)
    ids = [entry.spec.id for entry in catalog.entries()]
    assert DEFAULT_MODEL in ids and "@cf/google/gemma-3-270m" in ids
    assert catalog.get(DEFAULT_MODEL).max_tokens_default == 256


def test_a_user_catalog_replaces_the_built_in_one(tmp_path: Path) -> None:
    path = tmp_path / "catalog.toml"
    path.write_text(
        '[[models]]\nid = "@cf/me/mine"\nartifact = { path = "/nowhere/mine.gguf" }\ncontext_window = 512\n'
        "pricing = { input_per_million = 1.5, output_per_million = 2 }\nmax_instances = 3\npinned = true\n"
    )
    catalog = load_catalog(path, tmp_path)
    spec = catalog.get("@cf/me/mine")
    assert (spec.context_window, spec.max_instances, spec.pinned) == (512, 3, True)
    assert spec.pricing.input_per_million == 1.5
    assert [entry.installed for entry in catalog.entries()] == [False]


def test_an_absent_artifact_is_not_installed_with_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "catalog.toml"
    path.write_text('[[models]]\nid = "@cf/me/mine"\nartifact = { path = "/nowhere/mine.gguf" }\n')
    with pytest.raises(ModelNotInstalled, match="not installed") as error:
        load_catalog(path, tmp_path).require_installed("@cf/me/mine")
    assert (error.value.status, error.value.code) == (400, 5007)


def test_an_unknown_model_is_5007(tmp_path: Path) -> None:
    with pytest.raises(NoSuchModel) as error:
        load_catalog(None, tmp_path).get("@cf/nobody/nothing")
    assert error.value.code == 5007


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("[[models]]\nid = 'bad id'\nartifact = { path = '/x' }\n", "id"),
        (
            "[[models]]\nid = '@cf/a/b'\nartifact = { path = '/x', package = 'p', file = 'f' }\n",
            "exactly one",
        ),
        ("[[models]]\nid = '@cf/a/b'\nartifact = { package = 'p' }\n", "file"),
        ("[[models]]\nid = '@cf/a/b'\nartifact = { path = '/x' }\nbogus = 1\n", "bogus"),
        ("[[models]\n", "invalid"),
        (
            "[[models]]\nid = '@cf/a/b'\nartifact = { path = '/x' }\n[[models]]\nid = '@cf/a/b'\nartifact = { path = '/y' }\n",
            "twice",
        ),
        (
            "[[models]]\nid = '@cf/a/b'\nartifact = { path = '/x' }\nfallbacks = ['@cf/a/c']\n",
            "falls back to @cf/a/c",
        ),
        ("[[models]]\nid = '@cf/a/b'\nartifact = { path = '/x' }\nfallbacks = ['@cf/a/b']\n", "itself"),
        (
            "[[models]]\nid = '@cf/a/b'\nartifact = { path = '/x' }\nfallbacks = ['@cf/a/c']\n"
            "[[models]]\nid = '@cf/a/c'\nartifact = { path = '/y' }\nfamily = 'glm47'\n",
            "another task or chat family",
        ),
        (
            "[[models]]\nid = '@cf/a/b'\nartifact = { path = '/x' }\ndeny_patterns = ['(unclosed']\n",
            "unclosed",
        ),
        (
            "[[models]]\nid = '@cf/a/b'\nartifact = { path = '/x' }\noutput_deny_patterns = ['x*']\n",
            "empty string",
        ),
        (
            "[[models]]\nid = '@cf/a/b'\nartifact = { path = '/x' }\noutput_filters = ['ssn']\n",
            "output_filters",
        ),
    ],
)
def test_a_broken_catalog_is_refused_with_the_reason(tmp_path: Path, text: str, complaint: str) -> None:
    path = tmp_path / "catalog.toml"
    path.write_text(text)
    with pytest.raises(CatalogError, match=complaint):
        load_catalog(path, tmp_path)


def test_cached_prompt_tokens_are_priced_at_the_cached_input_price(tmp_path: Path) -> None:
    pricing = load_catalog(None, tmp_path).get(DEFAULT_MODEL).pricing
    assert pricing.cached_input_per_million is not None
    assert pricing.cached_input_per_million < pricing.input_per_million
    full = pricing.cost(prompt_tokens=1000, completion_tokens=100)
    cached = pricing.cost(prompt_tokens=1000, completion_tokens=100, cached_tokens=800)
    saved = 800 * (pricing.input_per_million - pricing.cached_input_per_million) / 1_000_000
    assert cached == pytest.approx(full - saved)
