"""llama.cpp's C API calls that fill a caller's buffer with text, wrapped to return Python values.

Import this only after library.reexec_with: importing llama_cpp loads the engine's libraries.
"""

import ctypes
from collections.abc import Callable, Sequence
from typing import Any

import llama_cpp

Model = Any  # llama_cpp's opaque model pointer
Vocab = Any  # llama_cpp's opaque vocabulary pointer


def read_string(fill: Callable[..., int], *args: object) -> str | None:
    """Calls fill(*args, buffer, size), growing the buffer until the text fits; None when fill fails."""
    size = 1 << 12
    while True:
        buffer = ctypes.create_string_buffer(size)
        length = fill(*args, buffer, size)
        if length < 0:
            return None
        if length < size:
            return buffer.raw[:length].decode("utf-8", errors="surrogateescape")
        size = length + 1


def metadata(model: Model) -> dict[str, object]:
    """Every key/value in llama_model_meta_* index order (each also looked up by key), template and desc."""
    count = llama_cpp.llama_model_meta_count(model)
    items = []
    for index in range(count):
        key = read_string(llama_cpp.llama_model_meta_key_by_index, model, index)
        value = read_string(llama_cpp.llama_model_meta_val_str_by_index, model, index)
        by_key = read_string(
            llama_cpp.llama_model_meta_val_str, model, (key or "").encode("utf-8", "surrogateescape")
        )
        items.append([key, value, by_key == value])
    template = llama_cpp.llama_model_chat_template(model, None)
    return {
        "meta_count": count,
        "meta": items,
        "chat_template": None if template is None else template.decode("utf-8", errors="surrogateescape"),
        "desc": read_string(llama_cpp.llama_model_desc, model),
    }


def tokenize(vocab: Vocab, data: bytes, add_special: bool, parse_special: bool) -> list[int] | int:
    """The tokens of data, or llama_tokenize's negative status when it fails even with room enough."""
    capacity = len(data) + 16
    for _ in range(2):
        tokens = (llama_cpp.llama_token * capacity)()
        count = llama_cpp.llama_tokenize(vocab, data, len(data), tokens, capacity, add_special, parse_special)
        if count >= 0:
            return list(tokens[:count])
        capacity = -count
    return int(count)


def detokenize(vocab: Vocab, tokens: Sequence[int], remove_special: bool, unparse_special: bool) -> bytes:
    array = (llama_cpp.llama_token * max(1, len(tokens)))(*tokens)
    capacity = 64 + 16 * len(tokens)
    while True:
        buffer = ctypes.create_string_buffer(capacity)
        length = llama_cpp.llama_detokenize(
            vocab, array, len(tokens), buffer, capacity, remove_special, unparse_special
        )
        if length >= 0:
            return buffer.raw[:length]
        capacity = -length + 1


def token_piece(vocab: Vocab, token: int, special: bool, buffer: ctypes.Array[ctypes.c_char]) -> bytes:
    """llama_token_to_piece of token; buffer is reused across calls and replaced when too small."""
    length = llama_cpp.llama_token_to_piece(vocab, token, buffer, len(buffer), 0, special)
    if length < 0:
        buffer = ctypes.create_string_buffer(-length)
        length = llama_cpp.llama_token_to_piece(vocab, token, buffer, len(buffer), 0, special)
    return buffer.raw[:length]
