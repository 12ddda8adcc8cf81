"""Estimate what one loaded instance costs in memory, from its GGUF metadata, before loading it."""

from dataclasses import dataclass

from cirrus.store.gguf import MetaValue

MIB = 1024 * 1024
KV_BYTES_PER_VALUE = 2  # llama.cpp's default KV cache type is f16
COMPUTE_BASE_BYTES = 48 * MIB
UBATCH_TOKENS = 512
# A worker is a Python interpreter with llama.cpp loaded: 40 MiB resident before any model (measured), plus
# allocator slack and the sampler and tokenizer state once a model is loaded.
PROCESS_OVERHEAD_BYTES = 64 * MIB


@dataclass(frozen=True)
class MemoryEstimate:
    weights: int
    kv_cache: int
    compute: int
    process: int = PROCESS_OVERHEAD_BYTES
    host_cache: int = 0  # KV prefixes evicted to host memory (runtime.host_tier), at most

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.compute + self.process + self.host_cache


def _int(metadata: dict[str, MetaValue], key: str, default: int) -> int:
    value = metadata.get(key, default)
    return int(value) if isinstance(value, int | float) else default


def estimate_instance(
    metadata: dict[str, MetaValue], weights_bytes: int, n_ctx: int, host_cache_tokens: int = 0
) -> MemoryEstimate:
    arch = str(metadata.get("general.architecture", "llama"))
    layers = _int(metadata, f"{arch}.block_count", 32)
    embedding = _int(metadata, f"{arch}.embedding_length", 4096)
    heads = _int(metadata, f"{arch}.attention.head_count", 32)
    kv_heads = _int(metadata, f"{arch}.attention.head_count_kv", heads)
    head_dim = embedding // max(heads, 1)
    key_len = _int(metadata, f"{arch}.attention.key_length", head_dim)
    value_len = _int(metadata, f"{arch}.attention.value_length", head_dim)
    kv_per_token = layers * kv_heads * (key_len + value_len) * KV_BYTES_PER_VALUE
    kv_cache = n_ctx * kv_per_token
    vocab = _vocab_size(metadata, arch)
    compute = COMPUTE_BASE_BYTES + UBATCH_TOKENS * (embedding * 4 * 4) + vocab * 4
    return MemoryEstimate(
        weights=weights_bytes,
        kv_cache=kv_cache,
        compute=compute,
        host_cache=host_cache_tokens * kv_per_token,
    )


def estimate_embedding_instance(
    metadata: dict[str, MetaValue], weights_bytes: int, text_tokens: int
) -> MemoryEstimate:
    """An embeddings instance encodes up to `text_tokens` tokens in one micro-batch with full attention over
    it: beyond a generator's compute, the attention scores of every head (tokens x tokens floats) and the
    per-token outputs pooling reads. Its cache, if the architecture keeps one, is one batch wide."""
    base = estimate_instance(metadata, weights_bytes, text_tokens)
    arch = str(metadata.get("general.architecture", "llama"))
    heads = _int(metadata, f"{arch}.attention.head_count", 32)
    embedding = _int(metadata, f"{arch}.embedding_length", 4096)
    attention = heads * text_tokens * text_tokens * 4
    outputs = text_tokens * embedding * 4
    return MemoryEstimate(base.weights, base.kv_cache, base.compute + attention + outputs)


def longest_text(metadata: dict[str, MetaValue], context_window: int) -> int:
    """The most tokens an embeddings instance reads per text: the catalog's window, within what the model was
    trained on (position embeddings end there)."""
    arch = str(metadata.get("general.architecture", "llama"))
    return min(context_window, _int(metadata, f"{arch}.context_length", context_window))


def _vocab_size(metadata: dict[str, MetaValue], arch: str) -> int:
    tokens = metadata.get("tokenizer.ggml.tokens")
    if isinstance(tokens, list) and tokens and isinstance(tokens[0], int):
        return tokens[0]
    return _int(metadata, f"{arch}.vocab_size", 32000)
