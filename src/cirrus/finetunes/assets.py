"""One asset upload, from the staged file to a ready finetune: the file is checked (checks.py) against the
finetune's base model, stored content-addressed in the blob store and recorded; once both assets are there they
are checked together and converted to a GGUF LoRA adapter with llama.cpp's converter, off the event loop and one
conversion at a time, and the finetune records that adapter's digest and path.

A refused file leaves nothing behind (unless identical bytes were stored before); a file is checked alone, then
beside the finetune's other asset where that is in. The two recorded files are checked together again before they
are converted, as two uploads at once each saw the other asset missing. A pair refused then, or a conversion that
fails, leaves the finetune not ready with both assets recorded: uploading either again tries again. A ready
finetune's assets cannot change (as on Workers AI): its adapter is what requests already run with.
"""

import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cirrus.catalog import Catalog, ModelSpec
from cirrus.errors import InvalidInput, NotFound
from cirrus.finetunes import convert
from cirrus.finetunes.base_shape import UnknownShape, base_shape
from cirrus.finetunes.checks import AdapterConfig, AdapterWeights, check_config, check_pair, check_weights
from cirrus.finetunes.errors import ConverterUnavailable, LoraUnsupported
from cirrus.finetunes.model import Asset, Finetune
from cirrus.finetunes.store import FinetuneStore
from cirrus.store.blobs import Blob, BlobStore
from cirrus.store.gguf import MetaValue

INSTALL_CONVERTER = "the server cannot convert adapters: install cirrus[pack] (llama.cpp's LoRA converter)"


class BaseModels(Protocol):
    """Where a base model's GGUF and its metadata come from (the pool's launcher)."""

    async def metadata(self, spec: ModelSpec) -> dict[str, MetaValue]: ...

    async def artifact_path(self, spec: ModelSpec) -> Path: ...


@dataclass(frozen=True)
class AssetLimits:
    max_rank: int
    max_bytes: int
    convert_timeout_s: float


class AssetUploads:
    def __init__(
        self,
        store: FinetuneStore,
        blobs: BlobStore,
        catalog: Catalog,
        bases: BaseModels,
        limits: AssetLimits,
    ) -> None:
        self._store = store
        self._blobs = blobs
        self._catalog = catalog
        self._bases = bases
        self._limits = limits
        self._converting = asyncio.Lock()

    def staging(self) -> tempfile.TemporaryDirectory[str]:
        """A folder for an upload's file, on the blob store's filesystem so that storing it is a rename."""
        self._blobs.scratch.mkdir(parents=True, exist_ok=True)
        return tempfile.TemporaryDirectory(dir=self._blobs.scratch, prefix="finetune-")

    def open_for_upload(self, finetune: Finetune) -> ModelSpec:
        """The base model `finetune`'s assets are checked against: InvalidInput if it is ready (its assets cannot
        change), LoraUnsupported if its model takes no adapters."""
        if finetune.ready:
            raise InvalidInput(
                f"finetune '{finetune.name}' is ready: its assets cannot change; create a new finetune",
                param="file_name",
            )
        return lora_base_model(self._catalog, finetune.model)

    async def upload(self, account_id: str, ref: str, asset: Asset, staged: Path) -> Finetune:
        finetune = await self._store.find(account_id, ref)
        if finetune is None:
            raise NotFound(f"no finetune '{ref}' in this account", param="finetune_id")
        spec = self.open_for_upload(finetune)
        await self._check({asset: staged, **self._recorded(finetune, leaving_out=asset)}, spec)
        blob = await asyncio.to_thread(self._blobs.adopt, staged)
        recorded = await self._store.set_asset(finetune.id, asset, blob.digest)
        if recorded is None:  # deleted, or made ready by another upload, meanwhile
            raise NotFound(f"finetune '{ref}' changed while its asset was uploaded: look it up again")
        if recorded.missing:
            return recorded
        return await self._make_ready(recorded, spec)

    def _recorded(self, finetune: Finetune, leaving_out: Asset | None = None) -> dict[Asset, Path]:
        digests = finetune.digests.items()
        return {asset: self._blobs.get(digest).path for asset, digest in digests if asset is not leaving_out}

    async def _check(self, files: dict[Asset, Path], spec: ModelSpec) -> None:
        """Each file alone, in order, then the two together where both are there."""
        checked = {asset: await self._checked(asset, path, spec) for asset, path in files.items()}
        config, weights = checked.get(Asset.CONFIG), checked.get(Asset.WEIGHTS)
        if isinstance(config, AdapterConfig) and isinstance(weights, AdapterWeights):
            check_pair(config, weights)

    async def _checked(self, asset: Asset, path: Path, spec: ModelSpec) -> AdapterConfig | AdapterWeights:
        if asset is Asset.CONFIG:
            return await asyncio.to_thread(self._config, path, spec)
        return await self._weights(path, spec)

    def _config(self, path: Path, spec: ModelSpec) -> AdapterConfig:
        assert spec.lora_base is not None  # lora_base_model checked it
        return check_config(path, spec.lora_base, self._limits.max_rank)

    async def _weights(self, path: Path, spec: ModelSpec) -> AdapterWeights:
        try:
            shape = base_shape(await self._bases.metadata(spec))
        except UnknownShape as error:
            raise LoraUnsupported(f"{spec.id} cannot take adapters here: {error}", param="model") from None
        limits = self._limits
        return await asyncio.to_thread(check_weights, path, shape, limits.max_rank, limits.max_bytes)

    async def _make_ready(self, finetune: Finetune, spec: ModelSpec) -> Finetune:
        """The ready finetune, or the one a concurrent upload made ready first."""
        files = self._recorded(finetune)
        # Two uploads at once each checked their file while the other was not recorded yet: check them together.
        await self._check(files, spec)
        adapter = await self._convert(files[Asset.CONFIG], files[Asset.WEIGHTS], spec)
        await self._store.mark_ready(finetune, adapter.digest, str(adapter.path))
        current = await self._store.get(finetune.account_id, finetune.id)
        if current is None:
            raise NotFound(f"finetune '{finetune.name}' was deleted while its adapter was converted")
        return current

    async def _convert(self, config: Path, weights: Path, spec: ModelSpec) -> Blob:
        base = await self._bases.artifact_path(spec)
        async with self._converting:
            with self.staging() as work:
                adapter_dir = Path(work) / "adapter"
                adapter_dir.mkdir()
                (adapter_dir / Asset.CONFIG.value).symlink_to(config)
                (adapter_dir / Asset.WEIGHTS.value).symlink_to(weights)
                out = Path(work) / "adapter.gguf"
                try:
                    await asyncio.to_thread(
                        convert.convert_adapter, adapter_dir, base, out, self._limits.convert_timeout_s
                    )
                except convert.ConverterMissing as error:
                    raise ConverterUnavailable(f"{INSTALL_CONVERTER} ({error})") from None
                except convert.ConversionError as error:
                    raise InvalidInput(
                        f"llama.cpp's converter could not convert the adapter: {error}", param="file"
                    ) from None
                return await asyncio.to_thread(self._blobs.adopt, out)


def lora_base_model(catalog: Catalog, model_id: str) -> ModelSpec:
    """The catalog's model, if it takes adapters; NoSuchModel or LoraUnsupported otherwise."""
    spec = catalog.get(model_id)
    if spec.lora_base is None:
        raise LoraUnsupported(
            f"The model {model_id} does not support LoRA adapters (fine-tunes)", param="model"
        )
    return spec
