"""The upload flow with a stand-in converter: each asset is checked before it is stored; a refused one leaves no
blob; the second asset converts the pair (both files side by side, as PEFT wrote them) and the finetune records
the adapter's digest and path; a failed or impossible conversion leaves it not ready, with a clear error."""

import asyncio
import json
import re
import shutil
from pathlib import Path

import pytest

from cirrus.catalog import ModelSpec, load_catalog
from cirrus.config import Settings
from cirrus.db import Database
from cirrus.errors import InvalidInput, NotFound
from cirrus.finetunes import Asset, Finetune, FinetuneStore
from cirrus.finetunes import assets as assets_module
from cirrus.finetunes.assets import AssetLimits, AssetUploads, lora_base_model
from cirrus.finetunes.errors import ConverterUnavailable, LoraUnsupported
from cirrus.store.blobs import BlobStore, sha256_file
from cirrus.store.gguf import MetaValue
from tests.unit.synthetic_adapter import adapter_config, lora_tensors, write_adapter

SMOLLM = "@cf/huggingface/smollm2-135m-instruct"
SMOLLM_METADATA: dict[str, MetaValue] = {
    "general.architecture": "llama",
    "llama.block_count": 30,
    "llama.embedding_length": 576,
    "llama.feed_forward_length": 1536,
    "llama.attention.head_count": 9,
    "llama.attention.head_count_kv": 3,
}


class ConversionError(Exception):
    pass


class ConverterMissing(Exception):
    pass


class FakeConverter:
    """Writes the adapter's two files, concatenated, as the "GGUF"; or fails as told."""

    ConversionError = ConversionError
    ConverterMissing = ConverterMissing

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], Path, float]] = []
        self.fails: Exception | None = None

    def convert_adapter(self, adapter_dir: Path, base_gguf: Path, out_file: Path, timeout_s: float) -> None:
        self.calls.append((sorted(p.name for p in adapter_dir.iterdir()), base_gguf, timeout_s))
        if self.fails is not None:
            raise self.fails
        parts = [(adapter_dir / asset.value).read_bytes() for asset in Asset]
        out_file.write_bytes(b"GGUF" + b"".join(parts))


class FakeBases:
    async def metadata(self, spec: ModelSpec) -> dict[str, MetaValue]:
        return SMOLLM_METADATA

    async def artifact_path(self, spec: ModelSpec) -> Path:
        return Path("/models/smollm2.gguf")


def magic(path: Path) -> bytes:
    with path.open("rb") as stream:
        return stream.read(4)


@pytest.fixture
def converter(monkeypatch: pytest.MonkeyPatch) -> FakeConverter:
    fake = FakeConverter()
    monkeypatch.setattr(assets_module, "convert", fake)
    return fake


@pytest.fixture
def adapter(tmp_path: Path) -> Path:
    return write_adapter(tmp_path / "adapter")


async def uploads_on(
    database: Database, root: Path, store: FinetuneStore | None = None
) -> tuple[AssetUploads, FinetuneStore, BlobStore]:
    store = store or await FinetuneStore.open(database)
    blobs = BlobStore(root / "store")
    catalog = load_catalog(None, Settings().cache_dir)
    uploads = AssetUploads(store, blobs, catalog, FakeBases(), AssetLimits(32, 300 * 1024 * 1024, 60.0))
    return uploads, store, blobs


async def upload(
    uploads: AssetUploads, ref: str, source: Path, asset: Asset, account: str = "acct-a"
) -> Finetune:
    """As the route does: the file is staged first, then handed over."""
    with uploads.staging() as folder:
        staged = Path(folder) / "upload"
        shutil.copyfile(source, staged)
        return await uploads.upload(account, ref, asset, staged)


async def test_both_assets_make_the_finetune_ready(
    database: Database, tmp_path: Path, adapter: Path, converter: FakeConverter
) -> None:
    uploads, store, blobs = await uploads_on(database, tmp_path)
    made = await store.create("acct-a", "pirate", SMOLLM, None)
    config = await upload(uploads, "pirate", adapter / Asset.CONFIG.value, Asset.CONFIG)
    assert config.uploaded == [Asset.CONFIG] and not converter.calls
    ready = await upload(uploads, made.id, adapter / Asset.WEIGHTS.value, Asset.WEIGHTS)
    names = sorted(asset.value for asset in Asset)
    assert converter.calls == [(names, Path("/models/smollm2.gguf"), 60.0)]
    assert ready.ready and ready.adapter_path is not None and ready.weights_digest is not None
    adapter_file = Path(ready.adapter_path)
    assert magic(adapter_file) == b"GGUF"
    assert sha256_file(adapter_file) == ready.adapter_digest
    assert blobs.has(ready.weights_digest)
    assert not list(blobs.scratch.iterdir())  # nothing staged is left behind
    resolved = await store.resolve("acct-a", SMOLLM, "pirate")
    assert resolved.path == str(adapter_file)
    with pytest.raises(InvalidInput, match="is ready: its assets cannot change"):
        await upload(uploads, "pirate", adapter / Asset.CONFIG.value, Asset.CONFIG)


async def test_a_refused_asset_is_not_stored(
    database: Database, tmp_path: Path, adapter: Path, converter: FakeConverter
) -> None:
    uploads, store, blobs = await uploads_on(database, tmp_path)
    await store.create("acct-a", "pirate", SMOLLM, None)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(adapter_config(rank=64)))
    with pytest.raises(InvalidInput, match="'r' is 64; the rank may be at most 32"):
        await upload(uploads, "pirate", wrong, Asset.CONFIG)
    with pytest.raises(InvalidInput, match="not a valid safetensors file"):
        await upload(uploads, "pirate", adapter / Asset.CONFIG.value, Asset.WEIGHTS)
    assert blobs.digests() == []
    found = await store.find("acct-a", "pirate")
    assert found is not None and found.uploaded == []


async def test_a_file_that_disagrees_with_the_other_asset_is_refused_before_it_is_stored(
    database: Database, tmp_path: Path, adapter: Path, converter: FakeConverter
) -> None:
    uploads, store, blobs = await uploads_on(database, tmp_path)
    await store.create("acct-a", "pirate", SMOLLM, None)
    await upload(uploads, "pirate", adapter / Asset.CONFIG.value, Asset.CONFIG)
    rank_16 = write_adapter(tmp_path / "rank-16", tensors=lora_tensors(rank=16, layers=2))
    with pytest.raises(InvalidInput, match=re.escape("has rank 16, but adapter_config.json says r = 8")):
        await upload(uploads, "pirate", rank_16 / Asset.WEIGHTS.value, Asset.WEIGHTS)
    found = await store.find("acct-a", "pirate")
    assert found is not None and found.uploaded == [Asset.CONFIG] and len(blobs.digests()) == 1
    assert not converter.calls


class LookupsInStep(FinetuneStore):
    """A store whose lookups wait for each other: two uploads at once each find the finetune before either asset
    is recorded, so each checks its own file alone."""

    def __init__(self, database: Database, parties: int) -> None:
        super().__init__(database)
        self._together = asyncio.Barrier(parties)

    async def find(self, account_id: str, ref: str) -> Finetune | None:
        found = await super().find(account_id, ref)
        await self._together.wait()
        return found


async def test_two_assets_uploaded_at_once_are_checked_together_before_conversion(
    database: Database, tmp_path: Path, adapter: Path, converter: FakeConverter
) -> None:
    store = await FinetuneStore.open(database)
    uploads, _, _ = await uploads_on(database, tmp_path, LookupsInStep(database, parties=2))
    await store.create("acct-a", "pirate", SMOLLM, None)
    rank_16 = write_adapter(tmp_path / "rank-16", tensors=lora_tensors(rank=16, layers=2))
    outcomes = await asyncio.gather(
        upload(uploads, "pirate", adapter / Asset.CONFIG.value, Asset.CONFIG),
        upload(uploads, "pirate", rank_16 / Asset.WEIGHTS.value, Asset.WEIGHTS),
        return_exceptions=True,
    )
    refusals = [str(outcome) for outcome in outcomes if isinstance(outcome, InvalidInput)]
    mismatch = "has rank 16, but adapter_config.json says r = 8"
    assert refusals and all(mismatch in refusal for refusal in refusals), outcomes
    assert all(isinstance(outcome, Finetune | InvalidInput) for outcome in outcomes), outcomes
    assert not converter.calls
    found = await store.find("acct-a", "pirate")
    assert found is not None and not found.ready and found.missing == []


async def test_another_accounts_finetune_is_not_found(
    database: Database, tmp_path: Path, adapter: Path, converter: FakeConverter
) -> None:
    uploads, store, _ = await uploads_on(database, tmp_path)
    made = await store.create("acct-a", "pirate", SMOLLM, None)
    for ref in ("pirate", made.id):
        with pytest.raises(NotFound, match=f"no finetune '{ref}' in this account"):
            await upload(uploads, ref, adapter / Asset.CONFIG.value, Asset.CONFIG, account="acct-b")


@pytest.mark.parametrize(
    ("failure", "error", "message"),
    [
        (
            ConversionError("unsupported tensor"),
            InvalidInput,
            "converter could not convert the adapter: unsupported",
        ),
        (ConverterMissing("no gguf-py"), ConverterUnavailable, "install cirrus[pack]"),
    ],
)
async def test_a_failed_conversion_leaves_the_finetune_not_ready(
    database: Database,
    tmp_path: Path,
    adapter: Path,
    converter: FakeConverter,
    failure: Exception,
    error: type[Exception],
    message: str,
) -> None:
    uploads, store, _ = await uploads_on(database, tmp_path)
    await store.create("acct-a", "pirate", SMOLLM, None)
    converter.fails = failure
    await upload(uploads, "pirate", adapter / Asset.CONFIG.value, Asset.CONFIG)
    with pytest.raises(error) as refused:
        await upload(uploads, "pirate", adapter / Asset.WEIGHTS.value, Asset.WEIGHTS)
    assert message in str(refused.value)
    found = await store.find("acct-a", "pirate")
    assert found is not None and not found.ready and found.missing == []
    converter.fails = None  # uploading either asset again tries again
    again = await upload(uploads, "pirate", adapter / Asset.CONFIG.value, Asset.CONFIG)
    assert again.ready


def test_only_a_model_with_a_lora_base_takes_finetunes() -> None:
    catalog = load_catalog(None, Settings().cache_dir)
    assert lora_base_model(catalog, SMOLLM).lora_base == "HuggingFaceTB/SmolLM2-135M-Instruct"
    with pytest.raises(LoraUnsupported) as refused:
        lora_base_model(catalog, "@cf/google/gemma-3-270m")
    assert (refused.value.status, refused.value.code) == (400, 5005)
