"""What one embeddings request asks of an engine and what it gets back: protocol-neutral, sent as frames.

Plus the two pure steps of serving it: packing texts into batches, and L2-normalising a pooled vector.
"""

import math
from dataclasses import dataclass
from typing import Any

MAX_TEXTS = 100  # Workers AI's limit per request for its text-embeddings models
BATCH_SEQUENCES = 64  # texts encoded together in one llama.cpp batch, each its own sequence


@dataclass(frozen=True)
class EmbeddingInput:
    """The texts to embed; `field` is how the client named them ("text", "input"), for error messages."""

    texts: tuple[str, ...]
    field: str = "text"

    def to_frame(self) -> dict[str, Any]:
        return {"texts": list(self.texts), "field": self.field}

    @classmethod
    def from_frame(cls, frame: dict[str, Any]) -> "EmbeddingInput":
        return cls(tuple(str(text) for text in frame["texts"]), str(frame.get("field", "text")))


@dataclass(frozen=True)
class Embeddings:
    vectors: list[list[float]]
    prompt_tokens: int

    @property
    def dimensions(self) -> int:
        return len(self.vectors[0]) if self.vectors else 0


def pack(lengths: list[int], max_tokens: int, max_sequences: int) -> list[list[int]]:
    """Indices of texts grouped, in order, into batches of at most max_tokens tokens and max_sequences texts.
    Every length must be at most max_tokens."""
    batches: list[list[int]] = []
    current: list[int] = []
    used = 0
    for index, length in enumerate(lengths):
        if current and (used + length > max_tokens or len(current) >= max_sequences):
            batches.append(current)
            current, used = [], 0
        current.append(index)
        used += length
    if current:
        batches.append(current)
    return batches


def normalised(vector: list[float]) -> list[float]:
    """The vector scaled to unit length (sentence-transformers' Normalize); a zero vector stays zero."""
    norm = math.sqrt(math.fsum(value * value for value in vector))
    return [value / norm for value in vector] if norm > 0 else list(vector)
