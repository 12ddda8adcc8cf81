import struct
from pathlib import Path

import pytest

from cirrus.pool.memory import estimate_instance
from cirrus.store.gguf import GGUFError, read_metadata


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def write_gguf(path: Path) -> None:
    kvs = [
        _string("general.architecture") + struct.pack("<I", 8) + _string("llama"),
        _string("llama.block_count") + struct.pack("<II", 4, 2),
        _string("llama.embedding_length") + struct.pack("<II", 4, 64),
        _string("llama.attention.head_count") + struct.pack("<II", 4, 4),
        _string("llama.attention.head_count_kv") + struct.pack("<II", 4, 2),
        _string("tokenizer.ggml.tokens")
        + struct.pack("<IIQ", 9, 8, 3)
        + _string("a")
        + _string("b")
        + _string("c"),
        _string("tokenizer.ggml.scores") + struct.pack("<IIQ", 9, 6, 3) + struct.pack("<fff", 0.1, 0.2, 0.3),
        _string("general.flag") + struct.pack("<I?", 7, True),
    ]
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)) + b"".join(kvs))


def test_reads_scalars_strings_and_summarises_arrays(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    write_gguf(path)
    metadata = read_metadata(path)
    assert metadata["general.architecture"] == "llama"
    assert metadata["llama.block_count"] == 2
    assert metadata["tokenizer.ggml.tokens"] == [3]
    assert metadata["tokenizer.ggml.scores"] == [3]
    assert metadata["general.flag"] is True


def test_keeps_arrays_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    write_gguf(path)
    assert read_metadata(path, keep_arrays=True)["tokenizer.ggml.tokens"] == ["a", "b", "c"]


def test_a_file_that_is_not_gguf_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "not.gguf"
    path.write_bytes(b"PK\x03\x04 something else")
    with pytest.raises(GGUFError, match="not a GGUF"):
        read_metadata(path)


def test_a_truncated_header_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cut.gguf"
    write_gguf(path)
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(GGUFError):
        read_metadata(path)


def test_memory_estimate_counts_weights_kv_cache_and_compute(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    write_gguf(path)
    estimate = estimate_instance(read_metadata(path), weights_bytes=1000, n_ctx=128)
    head_dim = 64 // 4
    assert estimate.weights == 1000
    assert estimate.kv_cache == 2 * 128 * 2 * (head_dim + head_dim) * 2
    assert estimate.total == estimate.weights + estimate.kv_cache + estimate.compute + estimate.process
    bigger = estimate_instance(read_metadata(path), weights_bytes=1000, n_ctx=256)
    assert bigger.kv_cache == 2 * estimate.kv_cache
