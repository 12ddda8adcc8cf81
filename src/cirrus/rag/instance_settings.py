"""An AI Search instance's name and settings: Cloudflare's defaults and bounds, checked before anything is stored."""

import re
from collections.abc import Mapping
from typing import Any

from cirrus.errors import InvalidInput

DEFAULTS: dict[str, Any] = {
    "embedding_model": "@cf/sentence-transformers/all-minilm-l6-v2",
    "chat_model": "@cf/huggingface/smollm2-135m-instruct",
    "chunk_size": 256,
    "chunk_overlap": 10,
    "hybrid": False,
    "max_num_results": 10,
    "score_threshold": 0.0,
}
_INT_RANGES = {"chunk_size": (64, 1024), "chunk_overlap": (0, 30), "max_num_results": (1, 50)}
_ID = re.compile(r"[a-z0-9_-]{1,32}")
MAX_MODEL_CHARS = 200


def check_id(instance_id: str) -> str:
    if not isinstance(instance_id, str) or not _ID.fullmatch(instance_id):
        raise InvalidInput(
            "an AI Search instance id is 1 to 32 lowercase letters, digits, '-' or '_'", param="id"
        )
    return instance_id


def settings_with_defaults(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Every setting, the given ones checked and the rest at their defaults."""
    return {**DEFAULTS, **checked_settings(settings)}


def checked_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The given settings, each checked; an unknown name or a value out of bounds is InvalidInput."""
    unknown = sorted(set(settings) - set(DEFAULTS))
    if unknown:
        raise InvalidInput(f"unknown AI Search instance setting '{unknown[0]}'", param=unknown[0])
    return {name: _checked(name, value) for name, value in settings.items()}


def _checked(name: str, value: Any) -> Any:
    if name in _INT_RANGES:
        low, high = _INT_RANGES[name]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise InvalidInput(f"'{name}' must be an integer from {low} to {high}", param=name)
        return value
    if name == "hybrid":
        if not isinstance(value, bool):
            raise InvalidInput("'hybrid' must be true or false", param=name)
        return value
    if name == "score_threshold":
        # NaN fails the range test too
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
            raise InvalidInput("'score_threshold' must be a number from 0 to 1", param=name)
        return float(value)
    if not isinstance(value, str) or not 0 < len(value) <= MAX_MODEL_CHARS:
        raise InvalidInput(f"'{name}' must name a model", param=name)
    return value
