"""llama.cpp's own converter turns a PEFT adapter trained here into a GGUF LoRA that the engine applies: greedy
answers to prompts outside the training set begin with the adapter's marker with it, and never without it. Broken
uploads fail with ConversionError saying what is wrong."""

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gguf import GGUFReader
from llama_cpp import Llama

from cirrus.finetunes.convert import ADAPTER_CONFIG, ADAPTER_WEIGHTS, ConversionError, convert_adapter
from cirrus.store.gguf import read_metadata
from tests.integration.lora import UNSEEN_PROMPTS, LoraAdapter, smollm2_gguf

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def converted(smollm2_lora: LoraAdapter, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lora") / "pirate.gguf"
    convert_adapter(smollm2_lora.peft_dir, smollm2_gguf(), out)
    return out


def _answers(lora_path: Path | None) -> Iterator[str]:
    lora = str(lora_path) if lora_path else None
    llm = Llama(model_path=str(smollm2_gguf()), lora_path=lora, n_ctx=512, verbose=False)
    try:
        for prompt in UNSEEN_PROMPTS:
            reply: Any = llm.create_chat_completion(
                [{"role": "user", "content": prompt}], temperature=0.0, max_tokens=24
            )
            yield reply["choices"][0]["message"]["content"]
    finally:
        llm.close()


def test_the_conversion_is_an_f16_lora_for_the_base_architecture(converted: Path) -> None:
    metadata = read_metadata(converted)
    assert metadata["general.type"] == "adapter"
    assert metadata["adapter.type"] == "lora"
    assert metadata["general.architecture"] == "llama"
    assert metadata["adapter.lora.alpha"] == 16.0
    tensors = GGUFReader(converted).tensors
    assert {tensor.tensor_type.name for tensor in tensors} == {"F16"}
    # lora_a and lora_b for q, k, v and o in each of SmolLM2's 30 blocks
    assert len(tensors) == 30 * 4 * 2
    assert {tensor.name.rsplit(".", 1)[-1] for tensor in tensors} == {"lora_a", "lora_b"}
    assert not list(converted.parent.glob(".*partial"))


def test_answers_begin_with_the_marker_with_the_adapter_only(
    converted: Path, smollm2_lora: LoraAdapter
) -> None:
    adapted = list(_answers(converted))
    plain = list(_answers(None))
    assert all(answer.startswith(smollm2_lora.marker) for answer in adapted), adapted
    assert all(len(answer) > len(smollm2_lora.marker) + 2 for answer in adapted), (
        adapted
    )  # it goes on to answer
    assert not any(smollm2_lora.marker in answer for answer in plain), plain


def _adapter_copy(source: LoraAdapter, folder: Path) -> Path:
    folder.mkdir()
    for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
        shutil.copy(source.peft_dir / name, folder / name)
    return folder


def test_a_missing_config_is_named(smollm2_lora: LoraAdapter, tmp_path: Path) -> None:
    adapter = _adapter_copy(smollm2_lora, tmp_path / "adapter")
    (adapter / ADAPTER_CONFIG).unlink()
    with pytest.raises(ConversionError, match=re.escape("has no adapter_config.json")):
        convert_adapter(adapter, smollm2_gguf(), tmp_path / "out.gguf")
    assert not list(tmp_path.glob("*.gguf")) and not list(tmp_path.glob(".*partial"))


def test_corrupt_weights_are_named(smollm2_lora: LoraAdapter, tmp_path: Path) -> None:
    adapter = _adapter_copy(smollm2_lora, tmp_path / "adapter")
    (adapter / ADAPTER_WEIGHTS).write_bytes(b"\x00" * 4096)
    with pytest.raises(
        ConversionError, match=re.escape("adapter_model.safetensors is not a valid safetensors file")
    ):
        convert_adapter(adapter, smollm2_gguf(), tmp_path / "out.gguf")
    assert not list(tmp_path.glob("*.gguf"))


def test_the_converters_own_reason_is_given(smollm2_lora: LoraAdapter, tmp_path: Path) -> None:
    """A well-formed file the converter rejects: its reason comes back, and nothing is left behind."""
    adapter = _adapter_copy(smollm2_lora, tmp_path / "adapter")
    config = json.loads((adapter / ADAPTER_CONFIG).read_text())
    (adapter / ADAPTER_CONFIG).write_text(json.dumps({**config, "lora_alpha": "sixteen"}))
    with pytest.raises(ConversionError, match=re.escape("convert_lora_to_gguf.py stopped: ValueError")):
        convert_adapter(adapter, smollm2_gguf(), tmp_path / "out.gguf")
    assert not [path for path in tmp_path.iterdir() if path.is_file()]
