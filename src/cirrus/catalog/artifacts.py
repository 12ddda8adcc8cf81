"""Turn an artifact reference into a GGUF file on disk."""

import importlib
import importlib.util
from pathlib import Path

from cirrus.catalog.spec import ArtifactRef
from cirrus.store.blobs import BlobError
from cirrus.store.local import LocalStore, store_root
from cirrus.store.manifest import ManifestError
from cirrus.store.oci import Reference
from cirrus.store.pull import cached_model


def _package_dir(package: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _assembled_path(artifact: ArtifactRef, cache_dir: Path) -> Path:
    assert artifact.assemble is not None
    return cache_dir / "artifacts" / f"{artifact.assemble}.gguf"


def packed_path(ref: str, cache_dir: Path) -> Path:
    """The blob of a packed variant (`@cf/org/name:QUANT`); raises FileNotFoundError saying what is missing."""
    store = LocalStore(store_root(cache_dir))
    try:
        return store.blob_path(store.resolve(ref))
    except (ManifestError, BlobError, OSError) as exc:
        raise FileNotFoundError(f"artifact not installed: {exc}") from None


def locate(artifact: ArtifactRef, cache_dir: Path) -> Path | None:
    """The GGUF's path if it is (or can be made) present; cheap, never writes."""
    if artifact.path is not None:
        path = Path(artifact.path).expanduser()
        return path if path.is_file() else None
    if artifact.package is not None:
        folder = _package_dir(artifact.package)
        if folder is None or artifact.file is None:
            return None
        path = folder / artifact.file
        return path if path.is_file() else None
    if artifact.oci is not None:
        return cached_model(store_root(cache_dir), Reference.parse(artifact.oci))
    if artifact.store is not None:
        try:
            return packed_path(artifact.store, cache_dir)
        except FileNotFoundError:
            return None
    assert artifact.assemble is not None
    if _package_dir(artifact.assemble) is None:
        return None
    return _assembled_path(artifact, cache_dir)


def materialize(artifact: ArtifactRef, cache_dir: Path) -> Path:
    """The GGUF's path, assembling it first if needed (slow, once). Raises FileNotFoundError if absent."""
    if artifact.store is not None:
        return packed_path(artifact.store, cache_dir)  # says which of manifest and blob is missing
    path = locate(artifact, cache_dir)
    if path is None:
        raise FileNotFoundError(f"artifact not installed: {artifact.describe()}")
    if artifact.assemble is not None and not path.is_file():
        module = importlib.import_module(artifact.assemble)
        partial = path.with_suffix(".partial")
        partial.parent.mkdir(parents=True, exist_ok=True)
        module.assemble(partial, overwrite=True)
        partial.rename(path)
    return path
