"""Between the local store's manifests and OCI artifacts: push a packed variant with its whole manifest, and
record a pulled one under its manifest, so `@cf/org/name:QUANT` names it on the pulling node too."""

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from cirrus.store.blobs import BlobError
from cirrus.store.local import LocalStore, ManifestNotFound
from cirrus.store.manifest import Manifest, ManifestError
from cirrus.store.oci import CIRRUS_KEY, InvalidArtifact
from cirrus.store.pull import PulledModel


def packed_source(store: LocalStore, ref: str) -> tuple[Path, dict[str, Any]]:
    """The blob of a packed variant and its manifest's fields, for the artifact's config."""
    try:
        manifest = store.resolve(ref)
        return store.blob_path(manifest), manifest.model_dump(mode="json")
    except (ManifestError, BlobError) as exc:
        raise InvalidArtifact(str(exc)) from None


class ManifestConflict(ManifestError):
    """A pulled manifest would replace a local one that names a different blob."""


def record_pulled(store: LocalStore, pulled: PulledModel, replace: bool = False) -> Manifest | None:
    """Index a pulled artifact that carries a Cirrus manifest for its own layer; None for any other artifact.

    A local manifest of the same variant that names another blob is kept (ManifestConflict) unless `replace`.
    """
    carried = pulled.config.get(CIRRUS_KEY)
    if not isinstance(carried, dict):
        return None
    try:
        manifest = Manifest.model_validate({k: v for k, v in carried.items() if k in Manifest.model_fields})
    except ValidationError:
        return None  # pushed from a bare GGUF: a partial description, not a manifest
    if manifest.digest != pulled.digest:
        return None
    try:
        local = store.get(manifest.model_id, manifest.quantization)
    except ManifestNotFound:
        local = None
    if local is not None and local.digest == manifest.digest:
        return manifest  # already recorded; keep the local copy (and any evaluation it holds)
    if local is not None and not replace:
        raise ManifestConflict(
            f"{manifest.ref} is already in {store.root} as {local.digest}; the pulled artifact is "
            f"{manifest.digest}; pull with --replace to record the pulled one instead"
        )
    store.put(manifest)
    return manifest
