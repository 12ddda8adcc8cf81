"""`cirrus models add`: turn a packed artifact into a served model, with ids kept unique."""

from pathlib import Path

from pydantic import ValidationError

from cirrus.catalog.registered import Registered, RegistrationError, read_registered, write_registered
from cirrus.catalog.spec import ModelSpec
from cirrus.store.local import LocalStore
from cirrus.store.manifest import Manifest

MAX_DEFAULT_CONTEXT = 8192  # a registered model's KV cache stays modest unless asked otherwise


def spec_for(manifest: Manifest, blob: Path, model_id: str | None, context: int | None) -> ModelSpec:
    window = context or min(manifest.context_window, MAX_DEFAULT_CONTEXT)
    origin = f"{manifest.source.kind} {manifest.source.quantization}"
    if manifest.source.requantized:
        origin += ", requantized"
    fields = {
        "id": model_id or manifest.model_id,
        "task": manifest.task,
        "description": f"{manifest.ref}, packed by cirrus pack from {origin} ({manifest.digest[:19]})",
        "artifact": {"path": str(blob)},
        "context_window": window,
        "kv_cache_tokens": window,
        "install_hint": f"the store lacks {manifest.digest}; pack or pull {manifest.ref} again",
    }
    try:
        return ModelSpec.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        place = ".".join(str(part) for part in first["loc"])
        raise RegistrationError(f"{manifest.ref} cannot be served: {place}: {first['msg']}") from None


def add_model(
    store: LocalStore,
    registry: Path,
    catalog_ids: set[str],
    ref: str,
    *,
    model_id: str | None = None,
    replace: bool = False,
    context: int | None = None,
) -> Registered:
    manifest = store.resolve(ref)
    spec = spec_for(manifest, store.blob_path(manifest), model_id, context)
    entries = read_registered(registry)
    taken = {entry.spec.id for entry in entries}
    if not replace and spec.id in taken:
        raise RegistrationError(f"{spec.id} is already registered; pass --replace to register {ref} instead")
    if not replace and spec.id in catalog_ids:
        raise RegistrationError(
            f"{spec.id} is a catalog model; pass --replace to serve {ref} in its place, or --id to add it "
            "under another id"
        )
    entry = Registered(spec, manifest.ref, manifest.digest, replace=spec.id in catalog_ids)
    write_registered(registry, [e for e in entries if e.spec.id != spec.id] + [entry])
    return entry


def remove_model(registry: Path, model_id: str) -> None:
    entries = read_registered(registry)
    kept = [entry for entry in entries if entry.spec.id != model_id]
    if len(kept) == len(entries):
        raise RegistrationError(f"{model_id} is not a registered model (see `cirrus models`)")
    write_registered(registry, kept)
