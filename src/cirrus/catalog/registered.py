"""Models registered with `cirrus models add`: packed artifacts served beside the catalog's own models.

They live in `<state dir>/models.toml`, in the catalog's own format plus a `registration` table per model
(which packed artifact it is, and whether it may replace a catalog model of the same id).
"""

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from cirrus.catalog.spec import ModelSpec
from cirrus.config import Settings
from cirrus.store.atomic import write_bytes_atomic

REGISTERED_FILE = "models.toml"
HEADER = "# Models registered with `cirrus models add`; `cirrus serve` serves them beside its catalog.\n"


class RegistrationError(ValueError):
    pass


@dataclass(frozen=True)
class Registered:
    spec: ModelSpec
    artifact_ref: str  # the packed variant, @cf/org/name:QUANT
    digest: str
    replace: bool = False


def registered_models_path(state_dir: Path | None = None) -> Path:
    return (state_dir or Settings().state_dir) / REGISTERED_FILE


def read_registered(path: Path) -> list[Registered]:
    if not path.is_file():
        return []
    try:
        raw = tomllib.loads(path.read_text())
        return [_entry(dict(item)) for item in raw.get("models", [])]
    except ValidationError as exc:
        first = exc.errors()[0]
        place = ".".join(str(part) for part in first["loc"])
        raise RegistrationError(f"{path} is invalid: {place}: {first['msg']}") from None
    except (tomllib.TOMLDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise RegistrationError(f"{path} is invalid: {type(exc).__name__}: {exc}") from None


def _entry(item: dict[str, Any]) -> Registered:
    registration = item.pop("registration")
    return Registered(
        ModelSpec.model_validate(item),
        str(registration["artifact"]),
        str(registration["digest"]),
        bool(registration.get("replace", False)),
    )


def write_registered(path: Path, entries: list[Registered]) -> None:
    blocks = [HEADER]
    for entry in entries:
        fields = entry.spec.model_dump(mode="json", exclude_defaults=True)
        fields["id"] = entry.spec.id  # never a default, but keep it first and always present
        lines = ["[[models]]", *(f"{key} = {_toml(value)}" for key, value in fields.items())]
        registration = {"artifact": entry.artifact_ref, "digest": entry.digest, "replace": entry.replace}
        lines.append(f"registration = {_toml(registration)}")
        blocks.append("\n".join(lines) + "\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, "\n".join(blocks).encode(), path.parent)


def _toml(value: object) -> str:
    """Scalars, lists and inline tables: all the catalog format needs. JSON strings are TOML strings."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{key} = {_toml(item)}" for key, item in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def merge(specs: list[ModelSpec], registered: list[Registered], where: Path) -> list[ModelSpec]:
    """The catalog's specs plus the registered ones; a registered id replaces a catalog one only if allowed."""
    merged = {spec.id: spec for spec in specs}
    for entry in registered:
        if entry.spec.id in merged and not entry.replace:
            raise RegistrationError(
                f"{where}: {entry.spec.id} is also in the catalog; register it again with --replace, "
                "or under another id"
            )
        merged[entry.spec.id] = entry.spec
    return list(merged.values())
