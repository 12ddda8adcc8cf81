"""Token usage as both protocols report it (OpenAI's shape, which Workers AI's newer models share)."""

from typing import Any

from cirrus.runtime.params import Usage


def usage_dict(usage: Usage, reasoning_tokens: int | None = None) -> dict[str, Any]:
    """`reasoning_tokens`: for chat answers, the completion tokens spent thinking (`api/chat/answer.py`)."""
    body: dict[str, Any] = {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
    }
    if reasoning_tokens is not None:
        body["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return body
