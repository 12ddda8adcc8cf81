"""Which requests the response cache may answer, and the key an answer is stored under."""

import hashlib
import json
from typing import Any

from cirrus.runtime.params import GenerationInput, SamplingParams

KEY_VERSION = 2  # bump when the canonical form changes, so old entries are never read as new ones


def is_deterministic(inputs: GenerationInput) -> bool:
    """Greedy decoding (temperature 0) or a fixed seed: the same request gives the same answer."""
    return inputs.sampling.temperature <= 0 or inputs.sampling.seed is not None


def cache_key(account_id: str, model: str, inputs: GenerationInput, custom_key: str | None = None) -> str:
    """SHA-256 hex of a canonical JSON; a caller's own key still lives inside its account and model."""
    scope: dict[str, Any] = {"v": KEY_VERSION, "account": account_id, "model": model}
    if inputs.adapter is not None:  # a fine-tune's answers are its own, under a caller's key too
        scope["adapter"] = inputs.adapter
    if custom_key is not None:
        return _digest({**scope, "custom": custom_key})
    return _digest({**scope, "input": canonical_input(inputs)})


def canonical_input(inputs: GenerationInput) -> dict[str, Any]:
    return {
        "prompt": inputs.prompt,
        "messages": list(inputs.messages) if inputs.messages is not None else None,
        "raw": inputs.raw,
        "family": inputs.family,
        "tools": list(inputs.tools) if inputs.tools is not None else None,
        "enable_thinking": inputs.enable_thinking,
        "sampling": _canonical_sampling(inputs.sampling),
    }


def _canonical_sampling(sampling: SamplingParams) -> dict[str, Any]:
    shared = {
        "max_tokens": sampling.max_tokens,
        "stop": list(sampling.stop),
        "repetition_penalty": float(sampling.repetition_penalty),
        "frequency_penalty": float(sampling.frequency_penalty),
        "presence_penalty": float(sampling.presence_penalty),
        "grammar": sampling.grammar,
    }
    if sampling.temperature <= 0:
        # Greedy decoding ignores top-k, top-p and the seed (runtime/llama.py's Sampler), so they stay out.
        return {**shared, "greedy": True}
    return {
        **shared,
        "temperature": float(sampling.temperature),
        "top_p": float(sampling.top_p),
        "top_k": sampling.top_k,
        "seed": sampling.seed,
    }


def _digest(document: dict[str, Any]) -> str:
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
