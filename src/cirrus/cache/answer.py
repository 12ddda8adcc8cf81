"""A whole answer as the response cache keeps it."""

import json
import time
from dataclasses import dataclass
from typing import Any

from cirrus.runtime.events import Finished
from cirrus.runtime.params import Usage

CACHEABLE_FINISH_REASONS = frozenset(
    {"stop", "length"}
)  # never "cancelled" or "error": those are not answers


@dataclass(frozen=True)
class CachedAnswer:
    text: str
    finish_reason: str
    usage: Usage
    model: str
    created_at: float  # Unix time the answer was generated
    stop_sequence: str | None = None

    @classmethod
    def of(cls, text: str, finished: Finished, model: str, created_at: float | None = None) -> "CachedAnswer":
        """A live generation's whole text and its finish event, as an answer generated now (or at created_at)."""
        when = time.time() if created_at is None else created_at
        return cls(text, finished.finish_reason, finished.usage, model, when, finished.stop_sequence)

    def to_json(self) -> str:
        usage = {
            "prompt_tokens": self.usage.prompt_tokens,
            "completion_tokens": self.usage.completion_tokens,
            "cached_tokens": self.usage.cached_tokens,
            "reasoning_tokens": self.usage.reasoning_tokens,
        }
        document = {
            "text": self.text,
            "finish_reason": self.finish_reason,
            "usage": usage,
            "model": self.model,
            "created_at": self.created_at,
            "stop_sequence": self.stop_sequence,
        }
        return json.dumps(document, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> "CachedAnswer":
        """Raise ValueError on anything but what `to_json` wrote."""
        try:
            return _from_document(json.loads(text))
        except (KeyError, TypeError, AttributeError) as error:
            raise ValueError(f"not a cached answer: {error}") from error


def _from_document(document: dict[str, Any]) -> CachedAnswer:
    usage = document["usage"]
    return CachedAnswer(
        text=_str(document["text"]),
        finish_reason=_str(document["finish_reason"]),
        usage=Usage(
            _int(usage["prompt_tokens"]),
            _int(usage["completion_tokens"]),
            _int(usage["cached_tokens"]),
            _int(usage.get("reasoning_tokens", 0)),
        ),
        model=_str(document["model"]),
        created_at=_float(document["created_at"]),
        stop_sequence=_optional_str(document.get("stop_sequence")),
    )


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not text")
    return value


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{value!r} is not a whole number")
    return value


def _float(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{value!r} is not a number")
    return float(value)


def _optional_str(value: object) -> str | None:
    return None if value is None else _str(value)
