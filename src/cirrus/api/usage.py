"""Token usage as both protocols report it (OpenAI's shape, which Workers AI's newer models share)."""

from typing import Any

from cirrus.runtime.params import Usage


def usage_dict(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
    }
