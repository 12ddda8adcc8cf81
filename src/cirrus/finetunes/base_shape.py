"""The shape an adapter must fit: a base model's layers and the input and output sizes of the projections a
LoRA adapter may change, read from its GGUF metadata (llama.cpp's keys, `<architecture>.*`)."""

from collections.abc import Mapping
from dataclasses import dataclass

from cirrus.store.gguf import MetaValue

ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")


class UnknownShape(ValueError):
    """The base model's metadata lacks a size the checks need."""


@dataclass(frozen=True)
class BaseShape:
    """`projections`: each projection's (input size, output size), as its weight is (output x input)."""

    architecture: str
    layers: int
    projections: dict[str, tuple[int, int]]


def base_shape(metadata: Mapping[str, MetaValue]) -> BaseShape:
    architecture = metadata.get("general.architecture")
    if not isinstance(architecture, str):
        raise UnknownShape("its GGUF names no general.architecture")
    sizes = _Sizes(metadata, architecture)
    hidden = sizes.get("embedding_length")
    heads = sizes.get("attention.head_count")
    kv_heads = sizes.get("attention.head_count_kv", heads)
    key_length = sizes.get("attention.key_length", hidden // heads)
    value_length = sizes.get("attention.value_length", key_length)
    feed_forward = sizes.get("feed_forward_length")
    projections = {
        "q_proj": (hidden, heads * key_length),
        "k_proj": (hidden, kv_heads * key_length),
        "v_proj": (hidden, kv_heads * value_length),
        "o_proj": (heads * value_length, hidden),
        "gate_proj": (hidden, feed_forward),
        "up_proj": (hidden, feed_forward),
        "down_proj": (feed_forward, hidden),
    }
    return BaseShape(architecture, sizes.get("block_count"), projections)


@dataclass(frozen=True)
class _Sizes:
    metadata: Mapping[str, MetaValue]
    architecture: str

    def get(self, name: str, default: int | None = None) -> int:
        key = f"{self.architecture}.{name}"
        value = self.metadata.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise UnknownShape(f"its GGUF has no single positive {key}")
        return value
