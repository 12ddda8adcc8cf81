"""Read a GGUF file's metadata (key/value section) without loading the engine."""

import struct
from pathlib import Path
from typing import BinaryIO

# llama.cpp's llama_ftype values, the ones `general.file_type` holds.
FILE_TYPES = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    32: "BF16",
}

MAGIC = b"GGUF"
SCALAR_FORMATS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
STRING, ARRAY = 8, 9
MetaValue = int | float | bool | str | list[object]

CHAT_TEMPLATE_KEY = "tokenizer.chat_template"  # the metadata key of a GGUF's own chat template


class GGUFError(ValueError):
    pass


def _read(stream: BinaryIO, fmt: str) -> tuple[object, ...]:
    size = struct.calcsize(fmt)
    data = stream.read(size)
    if len(data) != size:
        raise GGUFError("truncated GGUF header")
    return struct.unpack(fmt, data)


def _read_string(stream: BinaryIO) -> str:
    (length,) = _read(stream, "<Q")
    assert isinstance(length, int)
    return stream.read(length).decode("utf-8", errors="replace")


def _skip_array(stream: BinaryIO, item_kind: int, count: int) -> None:
    if item_kind in SCALAR_FORMATS:
        stream.seek(count * struct.calcsize(SCALAR_FORMATS[item_kind]), 1)
        return
    if item_kind != STRING:
        for _ in range(count):
            _read_value(stream, item_kind, keep_arrays=False)
        return
    for _ in range(count):
        (length,) = _read(stream, "<Q")
        assert isinstance(length, int)
        stream.seek(length, 1)


def _read_value(stream: BinaryIO, kind: int, keep_arrays: bool) -> MetaValue:
    if kind == STRING:
        return _read_string(stream)
    if kind == ARRAY:
        item_kind, count = _read(stream, "<IQ")
        assert isinstance(item_kind, int) and isinstance(count, int)
        if not keep_arrays:
            _skip_array(stream, item_kind, count)
            return [count]
        return [_read_value(stream, item_kind, keep_arrays) for _ in range(count)]
    if kind not in SCALAR_FORMATS:
        raise GGUFError(f"unknown GGUF value type {kind}")
    (value,) = _read(stream, SCALAR_FORMATS[kind])
    assert isinstance(value, int | float | bool)
    return value


def read_metadata(path: Path, keep_arrays: bool = False) -> dict[str, MetaValue]:
    """Every metadata key; arrays are replaced by [length] unless keep_arrays."""
    with path.open("rb") as stream:
        if stream.read(4) != MAGIC:
            raise GGUFError(f"{path} is not a GGUF file")
        version, _tensors, kv_count = _read(stream, "<IQQ")
        if version not in (2, 3):
            raise GGUFError(f"{path}: unsupported GGUF version {version}")
        assert isinstance(kv_count, int)
        metadata: dict[str, MetaValue] = {}
        for _ in range(kv_count):
            key = _read_string(stream)
            (kind,) = _read(stream, "<I")
            assert isinstance(kind, int)
            metadata[key] = _read_value(stream, kind, keep_arrays)
        return metadata
