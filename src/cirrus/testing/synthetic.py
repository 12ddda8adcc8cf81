"""Tiny GGUF checkpoints with random weights that llama.cpp loads and runs, one per architecture.

They prove the plumbing (loading, the tokenizer's special tokens, the chat template, decoding, serving), never
the quality: what they generate is random text. The same arguments write the same bytes.
"""

from collections.abc import Iterable
from pathlib import Path

import gguf
import numpy as np

from cirrus.testing.architectures import ARCHITECTURES, Architecture, TensorSpec
from cirrus.testing.vocab import TOKEN_FAMILIES, Vocabulary, vocabulary

WEIGHT_SCALE = 0.05


class UnknownArchitecture(ValueError):
    pass


def architecture(name: str) -> Architecture:
    try:
        return ARCHITECTURES[name]
    except KeyError:
        known = ", ".join(sorted(ARCHITECTURES))
        raise UnknownArchitecture(f"no synthetic checkpoint for {name!r}; known: {known}") from None


def write_synthetic(arch: str, path: Path, *, template: str | None, seed: int = 0) -> Path:
    """Write a synthetic checkpoint of `arch` (a key of ARCHITECTURES) to `path`, with `template` as its
    `tokenizer.chat_template` (none when None). Returns `path`."""
    spec = architecture(arch)
    vocab = vocabulary(TOKEN_FAMILIES[spec.tokens])
    rng = np.random.default_rng(seed)
    tensors = ((tensor.name, _values(tensor, rng)) for tensor in spec.tensors(len(vocab.tokens)))
    description = f"random weights shaped like {spec.describes}; proves plumbing, not quality"
    write_gguf(path, spec, vocab, f"cirrus-synthetic-{spec.name}", description, template, tensors)
    return path


def write_gguf(
    path: Path,
    spec: Architecture,
    vocab: Vocabulary,
    name: str,
    description: str,
    template: str | None,
    tensors: Iterable[tuple[str, np.ndarray]],
) -> None:
    """One GGUF file: the architecture's metadata, the vocabulary, the template, then the tensors in order."""
    writer = gguf.GGUFWriter(str(path), spec.arch)
    writer.add_name(name)
    writer.add_description(description)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_vocab_size(len(vocab.tokens))
    spec.metadata(writer)
    vocab.write(writer)
    if template is not None:
        writer.add_chat_template(template)
    for tensor_name, values in tensors:
        writer.add_tensor(tensor_name, values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _values(
    tensor: TensorSpec, rng: np.random.Generator
) -> np.ndarray[tuple[int, ...], np.dtype[np.floating]]:
    """Matrices in f16, vectors in f32, as the converter's `--outtype f16` stores them."""
    shape = tuple(reversed(tensor.shape))  # numpy's order is outermost first
    noise = rng.standard_normal(shape, dtype=np.float32)
    if tensor.kind == "norm":
        return (1.0 + 0.1 * noise).astype(np.float32)
    if tensor.kind == "bias":
        return (0.01 * noise).astype(np.float32)
    return (WEIGHT_SCALE * noise).astype(np.float16 if len(shape) > 1 else np.float32)
