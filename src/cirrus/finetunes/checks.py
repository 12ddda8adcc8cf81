"""The checks an uploaded adapter passes before it is stored: each refusal is a 400 that names the file, what is
wrong and what would be accepted.

`adapter_config.json`: a PEFT LoRA config, rank `r` (and every `rank_pattern` value) at most the limit, trained on
the model's `lora_base`. `adapter_model.safetensors`: at most the size limit; every tensor a lora_A or lora_B
matrix of a projection the base model has (a layer below its block count), lora_A (rank x input) and lora_B
(output x rank) sized as that projection, each rank at most the limit. Both together: the tensors' ranks are the
config's (llama.cpp scales each adapter by lora_alpha / r). Only the safetensors header is read, never its tensors.
"""

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cirrus.errors import InvalidInput
from cirrus.finetunes.base_shape import ATTENTION, MLP, BaseShape
from cirrus.finetunes.json_text import parse_json
from cirrus.finetunes.model import Asset
from cirrus.finetunes.safetensors_header import TensorInfo, read_header

MAX_CONFIG_BYTES = 1024 * 1024
MAX_LAYER_DIGITS = 6  # a layer number is read as an int: its digits are bounded before int() sees them
FLOAT_DTYPES = frozenset({"F32", "F16", "BF16"})
_TENSOR = re.compile(
    rf"(?:base_model\.model\.)?model\.layers\.(?P<layer>\d{{1,{MAX_LAYER_DIGITS}}})\."
    rf"(?P<module>self_attn\.(?:{'|'.join(ATTENTION)})|mlp\.(?:{'|'.join(MLP)}))"
    r"\.lora_(?P<matrix>[AB])(?:\.default)?\.weight"
)
_EXPECTED_NAMES = (
    "base_model.model.model.layers.N.self_attn.{q,k,v,o}_proj.lora_{A,B}.weight or "
    "base_model.model.model.layers.N.mlp.{gate,up,down}_proj.lora_{A,B}.weight"
)
CONFIG, WEIGHTS = Asset.CONFIG.value, Asset.WEIGHTS.value


@dataclass(frozen=True)
class AdapterConfig:
    rank: int
    rank_pattern: dict[str, int]


@dataclass(frozen=True)
class AdapterWeights:
    """Each adapted module (`model.layers.N.self_attn.q_proj`) and its rank."""

    ranks: dict[str, int]


def check_config(path: Path, lora_base: str, max_rank: int) -> AdapterConfig:
    config = _config_object(path)
    if config.get("peft_type") != "LORA":
        raise _refuse(
            CONFIG, f"'peft_type' is {config.get('peft_type')!r}; only LoRA adapters (\"LORA\") are served"
        )
    if config.get("use_dora") is True:
        raise _refuse(CONFIG, "'use_dora' is true; DoRA adapters cannot be converted for llama.cpp")
    _check_base(config.get("base_model_name_or_path"), lora_base)
    rank = _rank(config.get("r"), "'r'", max_rank)
    patterns = config.get("rank_pattern") or {}
    if not isinstance(patterns, dict):
        raise _refuse(CONFIG, "'rank_pattern' must be an object of module patterns and ranks")
    ranks = {
        str(key): _rank(value, f"'rank_pattern' for {key!r}", max_rank) for key, value in patterns.items()
    }
    return AdapterConfig(rank, ranks)


def check_weights(path: Path, base: BaseShape, max_rank: int, max_bytes: int) -> AdapterWeights:
    size = path.stat().st_size
    if size > max_bytes:
        raise _refuse(WEIGHTS, f"it is {size:,} bytes; an adapter may be at most {max_bytes:,} bytes")
    tensors = read_header(path, WEIGHTS)
    if not tensors:
        raise _refuse(WEIGHTS, "it holds no tensors")
    matrices: dict[str, dict[str, TensorInfo]] = {}
    for name, tensor in tensors.items():
        module, matrix = _module_of(name, base)
        if tensor.dtype not in FLOAT_DTYPES:
            raise _refuse(WEIGHTS, f"tensor '{name}' is {tensor.dtype}; adapters are F32, F16 or BF16")
        matrices.setdefault(module, {})[matrix] = tensor
    return AdapterWeights(
        {module: _module_rank(module, pair, base, max_rank) for module, pair in matrices.items()}
    )


def check_pair(config: AdapterConfig, weights: AdapterWeights) -> None:
    """With no `rank_pattern`, every module's rank is `r`; a pattern's ranks were bounded by `check_config`."""
    if config.rank_pattern:
        return
    for module, rank in sorted(weights.ranks.items()):
        if rank != config.rank:
            raise _refuse(
                WEIGHTS,
                f"{module} has rank {rank}, but adapter_config.json says r = {config.rank} (and no rank_pattern)",
            )


def _config_object(path: Path) -> dict[str, Any]:
    size = path.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise _refuse(CONFIG, f"it is {size:,} bytes; a PEFT config is a few kilobytes")
    try:
        config = parse_json(path.read_bytes())
    except ValueError as error:
        raise _refuse(CONFIG, f"it is not valid JSON ({error})") from None
    if not isinstance(config, dict):
        raise _refuse(CONFIG, "it must be a JSON object, PEFT's adapter config")
    return config


def _check_base(named: Any, lora_base: str) -> None:
    """The base's Hugging Face id, or a local folder of that name (an adapter trained on a local copy)."""
    if not isinstance(named, str) or not named:
        raise _refuse(
            CONFIG, f"it names no 'base_model_name_or_path'; this model takes adapters of {lora_base}"
        )
    local = "/" not in named or named.startswith(("/", "./", "../", "~"))
    folder = named.rstrip("/").rsplit("/", 1)[-1]
    if named.lower() != lora_base.lower() and not (
        local and folder.lower() == lora_base.rsplit("/", 1)[-1].lower()
    ):
        raise _refuse(
            CONFIG,
            f"'base_model_name_or_path' is {named!r}, but this model takes adapters trained on {lora_base!r}",
        )


def _rank(value: Any, what: str, max_rank: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _refuse(CONFIG, f"{what} must be a whole number of at least 1, not {value!r}")
    if value > max_rank:
        raise _refuse(
            CONFIG, f"{what} is {value}; the rank may be at most {max_rank}: train with r <= {max_rank}"
        )
    return value


def _module_of(name: str, base: BaseShape) -> tuple[str, str]:
    match = _TENSOR.fullmatch(name)
    if match is None:
        raise _refuse(
            WEIGHTS,
            f"tensor '{name}' is not a LoRA matrix of a {base.architecture} projection ({_EXPECTED_NAMES})",
        )
    layer = int(match["layer"])
    if layer >= base.layers:
        raise _refuse(
            WEIGHTS,
            f"tensor '{name}' is for layer {layer}, but the base model has {base.layers} layers (0-{base.layers - 1})",
        )
    return f"model.layers.{layer}.{match['module']}", match["matrix"]


def _module_rank(module: str, pair: dict[str, TensorInfo], base: BaseShape, max_rank: int) -> int:
    if set(pair) != {"A", "B"}:
        missing = "lora_B" if "A" in pair else "lora_A"
        raise _refuse(WEIGHTS, f"{module} has no {missing} matrix: a LoRA module needs lora_A and lora_B")
    inputs, outputs = base.projections[module.rsplit(".", 1)[-1]]
    a, b = pair["A"].shape, pair["B"].shape
    rank = a[0] if len(a) == 2 else 0
    if a != (rank, inputs) or b != (outputs, rank) or rank < 1:
        raise _refuse(
            WEIGHTS,
            f"{module}: lora_A is {list(a)} and lora_B is {list(b)}, but this base model needs [r, {inputs}] and "
            f"[{outputs}, r]: the adapter was trained on another model",
        )
    if rank > max_rank:
        raise _refuse(WEIGHTS, f"{module} has rank {rank}; the rank may be at most {max_rank}")
    return rank


def _refuse(asset: str, problem: str) -> InvalidInput:
    return InvalidInput(f"{asset}: {problem}", param="file")
