"""Synthetic PEFT LoRA adapters for SmolLM2-135M (random weights, real shapes), written as PEFT writes them:
adapter_config.json and adapter_model.safetensors."""

import json
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

SMOLLM_BASE = "HuggingFaceTB/SmolLM2-135M-Instruct"
# SmolLM2-135M (its GGUF's metadata): hidden 576, 30 layers, 9 heads and 3 KV heads of 64, feed-forward 1536.
HIDDEN, LAYERS, FEED_FORWARD, KV = 576, 30, 1536, 3 * 64
PROJECTIONS = {
    "self_attn.q_proj": (HIDDEN, HIDDEN),
    "self_attn.k_proj": (HIDDEN, KV),
    "self_attn.v_proj": (HIDDEN, KV),
    "self_attn.o_proj": (HIDDEN, HIDDEN),
    "mlp.gate_proj": (HIDDEN, FEED_FORWARD),
    "mlp.up_proj": (HIDDEN, FEED_FORWARD),
    "mlp.down_proj": (FEED_FORWARD, HIDDEN),
}


def adapter_config(
    rank: int = 8, targets: tuple[str, ...] = ("q_proj", "v_proj"), **changes: Any
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "base_model_name_or_path": SMOLLM_BASE,
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": rank,
        "lora_alpha": 2 * rank,
        "lora_dropout": 0.0,
        "rank_pattern": {},
        "alpha_pattern": {},
        "target_modules": list(targets),
        "bias": "none",
        "fan_in_fan_out": False,
    }
    return {**config, **changes}


def lora_tensors(
    rank: int = 8, targets: tuple[str, ...] = ("q_proj", "v_proj"), layers: int = LAYERS, seed: int = 0
) -> dict[str, np.ndarray]:
    """lora_A (rank x input) and lora_B (output x rank) for every target projection of every layer."""
    generator = np.random.default_rng(seed)
    tensors: dict[str, np.ndarray] = {}
    for layer in range(layers):
        for module, (inputs, outputs) in PROJECTIONS.items():
            if module.rsplit(".", 1)[-1] not in targets:
                continue
            prefix = f"base_model.model.model.layers.{layer}.{module}"
            tensors[f"{prefix}.lora_A.weight"] = generator.normal(0, 0.02, (rank, inputs)).astype(np.float32)
            tensors[f"{prefix}.lora_B.weight"] = generator.normal(0, 0.02, (outputs, rank)).astype(np.float32)
    return tensors


def write_adapter(
    folder: Path, config: dict[str, Any] | None = None, tensors: dict[str, np.ndarray] | None = None
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_config.json").write_text(
        json.dumps(config if config is not None else adapter_config())
    )
    save_file(tensors if tensors is not None else lora_tensors(), str(folder / "adapter_model.safetensors"))
    return folder
