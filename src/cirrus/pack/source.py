"""What a `cirrus pack` source is: a GGUF file or a Hugging Face checkpoint folder, and its precision."""

import hashlib
import json
import struct
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cirrus.pack.errors import PackError
from cirrus.pack.quants import FULL_PRECISION, name_of_ftype
from cirrus.store.blobs import sha256_file
from cirrus.store.gguf import MAGIC, GGUFError, MetaValue, read_metadata

CHECKPOINT_WEIGHTS = ("*.safetensors", "pytorch_model*.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.txt", "vocab.json", "tokenizer_config.json")
MAX_HEADER_BYTES = 100 * 1024 * 1024
NOT_A_MODEL = "is not a model: expected a GGUF file or a Hugging Face checkpoint folder (config.json, weights, tokenizer)"


@dataclass(frozen=True)
class Source:
    kind: Literal["gguf", "huggingface"]
    path: Path
    digest: str
    quantization: str  # the source's precision: F32, F16, BF16, Q4_1, ... or "unknown"

    @property
    def quantized(self) -> bool:
        return self.quantization not in FULL_PRECISION and self.quantization != "unknown"


def inspect_source(path: Path) -> Source:
    if path.is_dir():
        return _checkpoint(path)
    if not path.is_file():
        raise PackError(f"{path}: no such file or folder")
    with path.open("rb") as stream:
        if stream.read(4) != MAGIC:
            hint = "; give the folder that holds it" if path.suffix in (".safetensors", ".bin") else ""
            raise PackError(f"{path} {NOT_A_MODEL}{hint}")
    metadata = gguf_metadata(path)
    file_type = metadata.get("general.file_type")
    quantization = name_of_ftype(file_type) if isinstance(file_type, int) else "unknown"
    return Source("gguf", path, sha256_file(path), quantization)


def gguf_metadata(path: Path) -> dict[str, MetaValue]:
    try:
        metadata = read_metadata(path)
    except (GGUFError, UnicodeDecodeError, OSError, MemoryError, OverflowError) as exc:
        reason = str(exc).removeprefix(f"{path}: ") or type(exc).__name__
        raise PackError(f"{path} is a corrupted or truncated GGUF: {reason}") from None
    if not isinstance(metadata.get("general.architecture"), str):
        raise PackError(f"{path} is a corrupted GGUF: it names no general.architecture")
    return metadata


def _checkpoint(folder: Path) -> Source:
    if not (folder / "config.json").is_file():
        raise PackError(f"{folder} {NOT_A_MODEL}: it has no config.json")
    if not any(any(folder.glob(pattern)) for pattern in CHECKPOINT_WEIGHTS):
        raise PackError(f"{folder} is not a Hugging Face checkpoint: it has no *.safetensors weights")
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise PackError(f"{folder} is not a Hugging Face checkpoint: it has no tokenizer files")
    return Source("huggingface", folder, folder_digest(folder), checkpoint_precision(folder))


def checkpoint_precision(folder: Path) -> str:
    """The most common tensor dtype in the safetensors headers (F32, F16, BF16), or "unknown"."""
    counts: Counter[str] = Counter()
    for path in folder.glob("*.safetensors"):
        with path.open("rb") as stream:
            prefix = stream.read(8)
            length = struct.unpack("<Q", prefix)[0] if len(prefix) == 8 else 0
            try:
                header = json.loads(stream.read(min(length, MAX_HEADER_BYTES)))
            except ValueError:
                raise PackError(f"{path} is not a safetensors file: its header is not JSON") from None
        if not isinstance(header, dict):
            raise PackError(f"{path} is not a safetensors file: its header is not a table of tensors")
        counts.update(t["dtype"] for k, t in header.items() if k != "__metadata__" and isinstance(t, dict))
    dtype = counts.most_common(1)[0][0] if counts else "unknown"
    return {"F32": "F32", "F16": "F16", "BF16": "BF16"}.get(dtype, dtype)


def folder_digest(folder: Path) -> str:
    """sha256 over `<relative path> <sha256>` lines of every visible file, in sorted order."""
    lines = []
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if path.is_file() and not any(part.startswith((".", "__")) for part in relative.parts):
            lines.append(f"{relative.as_posix()} {sha256_file(path)}\n")
    return f"sha256:{hashlib.sha256(''.join(lines).encode()).hexdigest()}"
