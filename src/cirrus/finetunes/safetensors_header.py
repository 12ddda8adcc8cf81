"""A safetensors file's header, read without its tensors: 8 bytes (little-endian) giving the length of a JSON
object that names each tensor's dtype, shape and byte range. Anything malformed is InvalidInput naming the file
and what is wrong with it."""

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from cirrus.errors import InvalidInput
from cirrus.finetunes.json_text import parse_json

# An adapter's header names a few hundred tensors in tens of kilobytes; the safetensors library allows 100 MiB,
# which json.loads would turn into far more memory than that.
MAX_HEADER_BYTES = 4 * 1024 * 1024
LENGTH_BYTES = 8


@dataclass(frozen=True)
class TensorInfo:
    dtype: str
    shape: tuple[int, ...]


def read_header(path: Path, label: str) -> dict[str, TensorInfo]:
    """The tensors by name (`__metadata__` left out); `label` names the file in messages."""
    size = path.stat().st_size
    with path.open("rb") as stream:
        prefix = stream.read(LENGTH_BYTES)
        if len(prefix) < LENGTH_BYTES:
            raise _bad(label, f"it is {size} bytes, too short to hold a header")
        (length,) = struct.unpack("<Q", prefix)
        if length > size - LENGTH_BYTES:
            raise _bad(label, f"its header claims {length} bytes, more than the file holds")
        if length > MAX_HEADER_BYTES:
            raise _bad(
                label,
                f"its header claims {length} bytes; a header may be at most {MAX_HEADER_BYTES:,} bytes "
                "(an adapter's names its tensors in tens of kilobytes)",
            )
        text = stream.read(length)
    try:
        header = parse_json(text)
    except ValueError as error:
        raise _bad(label, f"its header is not JSON ({error})") from None
    if not isinstance(header, dict):
        raise _bad(label, "its header is not a JSON object")
    data_bytes = size - LENGTH_BYTES - length
    return {
        name: _tensor(label, name, entry, data_bytes)
        for name, entry in header.items()
        if name != "__metadata__"
    }


def _tensor(label: str, name: str, entry: Any, data_bytes: int) -> TensorInfo:
    if not isinstance(entry, dict):
        raise _bad(label, f"its header's entry for '{name}' is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or not _integers(shape) or not _integers(offsets) or len(offsets) != 2:
        raise _bad(label, f"tensor '{name}' lacks a dtype, a shape or its two data_offsets")
    start, end = offsets
    if not 0 <= start <= end <= data_bytes:
        raise _bad(label, f"tensor '{name}' lies outside the file (bytes {start}-{end} of {data_bytes})")
    return TensorInfo(dtype, tuple(shape))


def _integers(value: object) -> TypeGuard[list[int]]:
    return isinstance(value, list) and all(isinstance(n, int) and not isinstance(n, bool) for n in value)


def _bad(label: str, problem: str) -> InvalidInput:
    return InvalidInput(f"{label} is not a valid safetensors file: {problem}", param="file")
