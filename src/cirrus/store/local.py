"""The local artifact store: content-addressed blobs plus manifests indexed by model id and quantization.

<root>/blobs/sha256/<hex>                       the GGUF files
<root>/manifests/<@ns>/<org>/<name>/<QUANT>.json one manifest per packed variant
<root>/tmp/  <root>/partials/                   work in progress, never mistaken for a finished blob
"""

from pathlib import Path
from typing import Any

from cirrus.config import Settings
from cirrus.store.atomic import write_bytes_atomic
from cirrus.store.blobs import BlobNotFound, BlobStore
from cirrus.store.manifest import Manifest, ManifestError, parse_ref


class ManifestNotFound(ManifestError, LookupError):
    pass


def store_root(cache_dir: Path) -> Path:
    """Where the store lives inside a cache folder (`cirrus pack`, `cirrus pull` and the server agree on it)."""
    return cache_dir / "store"


def default_store_root(settings: Settings) -> Path:
    return store_root(settings.cache_dir)


class LocalStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.blobs = BlobStore(root)
        self._manifests = root / "manifests"

    @classmethod
    def from_settings(cls, settings: Settings) -> "LocalStore":
        return cls(default_store_root(settings))

    def manifest_path(self, model_id: str, quantization: str) -> Path:
        """Where a variant's manifest lives; refuses names that would lead outside the manifests folder."""
        path = self._manifests.joinpath(*model_id.split("/"), f"{quantization.upper()}.json")
        if not path.resolve().is_relative_to(self._manifests.resolve()):
            raise ManifestError(
                f"{model_id}:{quantization} does not name a manifest inside {self._manifests}"
            )
        return path

    def put(self, manifest: Manifest) -> Path:
        """Record a manifest; its blob must already be in the store."""
        blob = self.blobs.get(manifest.digest)
        if blob.size != manifest.size:
            raise ManifestError(
                f"{manifest.ref}: blob {manifest.digest} holds {blob.size} bytes, not {manifest.size}"
            )
        path = self.manifest_path(manifest.model_id, manifest.quantization)
        write_bytes_atomic(path, manifest.to_json().encode(), self.blobs.scratch)
        return path

    def get(self, model_id: str, quantization: str) -> Manifest:
        path = self.manifest_path(model_id, quantization)
        if not path.is_file():
            packed = [m.quantization for m in self.manifests(model_id)]
            have = (
                f"; packed variants of it: {', '.join(packed)}"
                if packed
                else "; nothing is packed under that id"
            )
            raise ManifestNotFound(
                f"no packed artifact {model_id}:{quantization.upper()} in {self.root}{have}"
            )
        return Manifest.from_json(path.read_text(), str(path))

    def resolve(self, ref: str) -> Manifest:
        """A manifest by reference (`@cf/org/name:QUANT`) or by the path of a manifest file."""
        if not ref.startswith("@"):
            path = Path(ref)
            if not path.is_file():
                raise ManifestNotFound(f"{ref}: no such manifest file (or give @cf/org/name:QUANT)")
            return Manifest.from_json(path.read_text(), ref)
        return self.get(*parse_ref(ref))

    def manifests(self, model_id: str | None = None) -> list[Manifest]:
        folder = self._manifests.joinpath(*model_id.split("/")) if model_id else self._manifests
        if not folder.is_dir():
            return []
        return [Manifest.from_json(p.read_text(), str(p)) for p in sorted(folder.rglob("*.json"))]

    def blob_path(self, manifest: Manifest) -> Path:
        """The GGUF of a manifest; raises if the blob is missing or its size disagrees."""
        blob = self.blobs.get(manifest.digest)
        if blob.size != manifest.size:
            raise BlobNotFound(
                f"{manifest.ref}: blob {manifest.digest} is {blob.size} bytes, not {manifest.size}"
            )
        return blob.path

    def set_evaluation(self, model_id: str, quantization: str, summary: dict[str, Any]) -> Manifest:
        """Fill a manifest's evaluation summary (what `cirrus eval quality` measured)."""
        updated = self.get(model_id, quantization).model_copy(update={"evaluation": summary})
        self.put(updated)
        return updated

    def remove(self, model_id: str, quantization: str) -> None:
        """Forget a manifest; its blob stays while another manifest may still name it."""
        self.manifest_path(model_id, quantization).unlink(missing_ok=True)
