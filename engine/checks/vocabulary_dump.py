"""The engine side of vocabulary.py: everything a build derives from a GGUF's vocabulary and metadata.

Import this only after library.reexec_with: importing llama_cpp loads the engine's libraries.
"""

import ctypes
import hashlib
from collections.abc import Mapping, Sequence

import llama_cpp
import numpy as np
from cli_support import CheckError
from llama_text import Model, Vocab, detokenize, metadata, token_piece, tokenize
from log_capture import LogCapture
from vocabulary_corpus import corpus

GENERATION_PROMPTS = (
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
)
GENERATION_TOKENS = 24
SPECIAL_IDS = (
    "bos", "eos", "eot", "sep", "nl", "pad", "mask", "fim_pre", "fim_suf", "fim_mid", "fim_pad", "fim_rep",
    "fim_sep", "get_add_bos", "get_add_eos", "get_add_sep",
)  # fmt: skip
SPECIAL_ATTRIBUTES = 1 << 1 | 1 << 3 | 1 << 4  # UNKNOWN | CONTROL | USER_DEFINED
DETOKENIZED_TEXTS = ("md:", "unicode:", "special:")

Dump = dict[str, object]


def vocabulary_dump(model_path: str, markdown_root: str, quick: bool) -> Dump:
    """A vocab-only load's vocabulary, metadata and tokenizations; then a full load's metadata and a short
    greedy generation. Every log line of each step is recorded with it."""
    logs = LogCapture()
    llama_cpp.llama_backend_init()
    dump: Dump = {"model": model_path}
    model = load(model_path, vocab_only=True)
    if model is None:
        raise CheckError(f"llama.cpp could not load the vocabulary of {model_path}")
    dump["log_vocab_only_load"] = logs.take()
    dump.update(vocab_only_part(model, markdown_root, quick))
    llama_cpp.llama_model_free(model)
    logs.take()
    dump.update(full_load_part(model_path, logs))
    return dump


def load(model_path: str, vocab_only: bool) -> Model | None:
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = vocab_only
    params.use_mmap = True
    return llama_cpp.llama_model_load_from_file(model_path.encode(), params) or None


def vocab_only_part(model: Model, markdown_root: str, quick: bool) -> Dump:
    meta = metadata(model)
    vocab = llama_cpp.llama_model_get_vocab(model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    tokens, texts, special_ids = token_table(vocab, n_vocab)
    tokenized, detokenized = tokenizations(vocab, corpus(markdown_root, texts, special_ids, quick))
    return {
        "vocab_only_meta": meta,
        "n_vocab": n_vocab,
        "vocab_type": llama_cpp.llama_vocab_type(vocab),
        "special": {name: int(getattr(llama_cpp, f"llama_vocab_{name}")(vocab)) for name in SPECIAL_IDS},
        "suppress_tokens": suppress_tokens(vocab),
        "tokens": tokens,
        "tokenize": tokenized,
        "detokenize": detokenized,
    }


def suppress_tokens(vocab: Vocab) -> list[int]:
    count = ctypes.c_int32(0)
    tokens = llama_cpp.llama_vocab_get_suppress_tokens(vocab, ctypes.byref(count))
    return [tokens[i] for i in range(count.value)] if tokens else []


def token_table(vocab: Vocab, n_vocab: int) -> tuple[list[list[object]], list[bytes], list[int]]:
    """Per token: text, score (its float32 bits, compared exactly), attributes, is_eog, is_control and its
    pieces without and with special; also the texts, and the ids of special-looking tokens."""
    buffer = ctypes.create_string_buffer(256)
    rows: list[list[object]] = []
    texts: list[bytes] = []
    special_ids: list[int] = []
    for token in range(n_vocab):
        text = llama_cpp.llama_vocab_get_text(vocab, token)
        score = llama_cpp.llama_vocab_get_score(vocab, token)
        attributes = int(llama_cpp.llama_vocab_get_attr(vocab, token))
        rows.append([
            text.hex(),
            int.from_bytes(ctypes.c_float(score), "little"),
            attributes,
            bool(llama_cpp.llama_vocab_is_eog(vocab, token)),
            bool(llama_cpp.llama_vocab_is_control(vocab, token)),
            token_piece(vocab, token, False, buffer).hex(),
            token_piece(vocab, token, True, buffer).hex(),
        ])  # fmt: skip
        texts.append(text)
        if attributes & SPECIAL_ATTRIBUTES:
            special_ids.append(token)
    return rows, texts, special_ids


def tokenizations(vocab: Vocab, texts: Mapping[str, bytes]) -> tuple[Dump, dict[str, str]]:
    """Each text's tokens under every add_special/parse_special combination, and for the first kinds of text
    a hash of the detokenization under every remove_special/unparse_special combination."""
    tokenized: Dump = {}
    detokenized: dict[str, str] = {}
    for name, data in texts.items():
        per_flags: Dump = {}
        for add_special in (False, True):
            for parse_special in (False, True):
                flags = f"{int(add_special)}{int(parse_special)}"
                tokens = tokenize(vocab, data, add_special, parse_special)
                per_flags[flags] = tokens if isinstance(tokens, list) else ["error", tokens]
                if isinstance(tokens, list) and tokens and name.startswith(DETOKENIZED_TEXTS):
                    detokenized.update(detokenization_hashes(vocab, tokens, f"{name}|{flags}"))
        tokenized[name] = per_flags
    return tokenized, detokenized


def detokenization_hashes(vocab: Vocab, tokens: Sequence[int], label: str) -> dict[str, str]:
    return {
        f"{label}|{int(remove)}{int(unparse)}": sha256(detokenize(vocab, tokens, remove, unparse))
        for remove in (False, True)
        for unparse in (False, True)
    }


def full_load_part(model_path: str, logs: LogCapture) -> Dump:
    model = load(model_path, vocab_only=False)
    part: Dump = {"log_full_load": logs.take()}
    if model is None:  # a vocab-only GGUF (e.g. llama.cpp's models/ggml-vocab-*.gguf)
        return {**part, "full_load": "failed"}
    part["full_meta"] = metadata(model)
    part["n_params"] = llama_cpp.llama_model_n_params(model)
    part["model_size"] = llama_cpp.llama_model_size(model)
    ctx = llama_cpp.llama_init_from_model(model, generation_context_params())
    if not ctx:
        raise CheckError(f"llama.cpp could not create a context for {model_path}")
    part["log_context"] = logs.take()
    part["generation"] = [greedy_generation(ctx, model, prompt) for prompt in GENERATION_PROMPTS]
    llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(model)
    part["log_free"] = logs.take()
    return part


def generation_context_params() -> llama_cpp.llama_context_params:
    params: llama_cpp.llama_context_params = llama_cpp.llama_context_default_params()
    params.n_ctx = params.n_batch = params.n_ubatch = 256
    params.n_threads = params.n_threads_batch = 2
    return params


def greedy_generation(ctx: object, model: Model, prompt: str) -> Dump:
    """The prompt's tokens, up to GENERATION_TOKENS greedy tokens (stopping at end of generation) and a hash
    of the logits after the prompt."""
    llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
    vocab = llama_cpp.llama_model_get_vocab(model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    prompt_tokens = tokenize(vocab, prompt.encode(), True, True)
    if not isinstance(prompt_tokens, list):
        raise CheckError(f"llama_tokenize failed on {prompt!r} ({prompt_tokens})")
    tokens = prompt_tokens
    generated: list[int] = []
    first_logits = None
    for _ in range(GENERATION_TOKENS):
        array = (llama_cpp.llama_token * len(tokens))(*tokens)  # must outlive the batch
        status = llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(array, len(tokens)))
        if status != 0:
            raise CheckError(f"llama_decode returned {status}")
        row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
        first_logits = first_logits or sha256(row.tobytes())
        best = int(row.argmax())  # the first maximum
        generated.append(best)
        if llama_cpp.llama_vocab_is_eog(vocab, best):
            break
        tokens = [best]
    return {"prompt": prompt_tokens, "generated": generated, "first_logits_sha256": first_logits}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
