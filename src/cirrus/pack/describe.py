"""Describe a packed GGUF as a manifest: what its metadata says plus how it was made."""

import datetime
import importlib.metadata
from dataclasses import dataclass

from cirrus.pack.source import Source, gguf_metadata
from cirrus.pool.memory import estimate_instance
from cirrus.store.blobs import Blob
from cirrus.store.gguf import MetaValue
from cirrus.store.manifest import Manifest, ManifestTask, MemoryFigures, Provenance
from cirrus.store.manifest import Source as SourceRecord


@dataclass(frozen=True)
class Making:
    """How every variant of one pack run was made."""

    command: list[str]
    versions: dict[str, str]
    created_at: str


def package_versions(*names: str) -> dict[str, str]:
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def now_utc() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def infer_task(metadata: dict[str, MetaValue]) -> ManifestTask:
    """An embedding model's GGUF names a pooling type; a generative one does not."""
    arch = str(metadata["general.architecture"])
    return "text-embeddings" if f"{arch}.pooling_type" in metadata else "text-generation"


def memory_figures(metadata: dict[str, MetaValue], size: int, context: int) -> MemoryFigures:
    estimate = estimate_instance(metadata, size, context)
    return MemoryFigures(
        context_tokens=context,
        weights_bytes=estimate.weights,
        kv_cache_bytes=estimate.kv_cache,
        compute_bytes=estimate.compute,
        process_bytes=estimate.process,
        total_bytes=estimate.total,
    )


def context_window(metadata: dict[str, MetaValue]) -> int:
    value = metadata.get(f"{metadata['general.architecture']}.context_length")
    return int(value) if isinstance(value, int) and value > 0 else 2048


def describe(
    blob: Blob,
    *,
    model_id: str,
    task: ManifestTask | None,
    quantization: str,
    source: Source,
    steps: list[str],
    note: str,
    making: Making,
) -> Manifest:
    metadata = gguf_metadata(blob.path)
    license_name = metadata.get("general.license")
    window = context_window(metadata)
    return Manifest(
        model_id=model_id,
        task=task or infer_task(metadata),
        architecture=str(metadata["general.architecture"]),
        quantization=quantization,
        size=blob.size,
        digest=blob.digest,
        context_window=window,
        memory=memory_figures(metadata, blob.size, window),
        chat_template="tokenizer.chat_template" in metadata,
        license=license_name if isinstance(license_name, str) else None,
        source=SourceRecord(
            kind=source.kind,
            path=str(source.path),
            digest=source.digest,
            quantization=source.quantization,
            requantized=source.quantized,
        ),
        made=Provenance(
            versions=making.versions,
            command=making.command,
            created_at=making.created_at,
            steps=steps,
            note=note,
        ),
    )
