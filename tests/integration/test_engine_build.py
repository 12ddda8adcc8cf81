"""The engine Cirrus builds (llama-cpp-python with engine/patches) computes what the stock engine computes.

engine/patches speed up llama.cpp: a batched kernel for Q4_1 weights, a faster vocabulary load, flash attention in
tiles. None may change a result: a sequence decoded inside a batch gets bitwise the logits it gets alone, a
one-sequence batch shorter than a tile gets bitwise what its rows get as the first rows of a 64-row batch (patch
0005: stock's tiled kernel computes both), and every model's vocabulary (token texts, pieces, attributes, special
tokens, tokenization) is the one the stock engine loads, whose fingerprint was recorded with the unpatched build.
"""

import ctypes
import hashlib
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from cirrus.catalog import ArtifactRef, load_catalog
from cirrus.catalog.artifacts import materialize
from cirrus.config import Settings
from cirrus.runtime.llama import ContextShape, LlamaModel
from tests.integration.conftest import GEMMA, SMOLLM

# sha256 of vocabulary_fingerprint() computed with the stock llama-cpp-python 0.3.36 build (no patches).
STOCK_VOCABULARY = {
    SMOLLM: "8943f8f7faea8547f4ba286ba7f6a2e01ac853f0e624904783e0d4be99d92d71",
    GEMMA: "89d497cf5bdda6e37f39ed6889a724d9445ee311945c94ea84c2befc2ef7936b",
}
CORPUS = (
    "Hello, world! Serverless inference on your own machines.",
    "  leading spaces, trailing spaces   \n\n\ttabs and newlines\r\n",
    "Accents: déjà vu, naïve, Ångström. CJK: 你好，世界。日本語のテキスト。 한국어 문장.",
    "Emoji 🚀🔥👩‍💻 and RTL: مرحبا بالعالم, שלום עולם.",
    'Code: def f(x: int) -> int:\n    return x ** 2  # squares\n{"json": [1, 2.5, null]}',
    "Numbers 1234567890 3.14159 -42 1e-9 and URLs https://example.com/a?b=c&d=e.",
)
PROMPTS = (
    "The history of the printing press begins",
    "Coral reefs are",
    "Write a haiku about glaciers:",
    "def fibonacci(n):",
    "Honeybees communicate by",
    "The steam engine changed",
    "In mathematics, a prime number is",
    "Roman aqueducts carried water",
)


def model_path(model_id: str) -> Path:
    cache_dir = Settings().cache_dir  # where the server keeps the assembled Gemma GGUF too
    artifact: ArtifactRef = load_catalog(None, cache_dir).get(model_id).artifact
    return materialize(artifact, cache_dir)


def vocabulary_fingerprint(path: Path) -> str:
    """A digest of everything the vocabulary decides: token texts, scores, attributes, pieces, special tokens and
    the tokenization of a varied corpus with and without special-token parsing."""
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    assert model, f"llama.cpp could not load {path}"
    try:
        vocab = llama_cpp.llama_model_get_vocab(model)
        digest = hashlib.sha256()
        _digest_tokens(vocab, digest)
        _digest_specials(vocab, digest)
        for text in (*CORPUS, *_special_texts(vocab)):
            for add_special in (False, True):
                for parse_special in (False, True):
                    digest.update(repr(_tokenize(vocab, text, add_special, parse_special)).encode())
        return digest.hexdigest()
    finally:
        llama_cpp.llama_model_free(model)


def _digest_tokens(vocab: object, digest: "hashlib._Hash") -> None:
    buffer = ctypes.create_string_buffer(256)
    for token in range(llama_cpp.llama_vocab_n_tokens(vocab)):
        digest.update(llama_cpp.llama_vocab_get_text(vocab, token))
        score, attr = (
            llama_cpp.llama_vocab_get_score(vocab, token),
            llama_cpp.llama_vocab_get_attr(vocab, token),
        )
        digest.update(repr((score, attr, llama_cpp.llama_vocab_is_eog(vocab, token))).encode())
        for special in (False, True):
            size = llama_cpp.llama_token_to_piece(vocab, token, buffer, len(buffer), 0, special)
            digest.update(buffer.raw[: max(size, 0)] + repr(size).encode())


def _digest_specials(vocab: object, digest: "hashlib._Hash") -> None:
    getters = ("bos", "eos", "eot", "sep", "nl", "pad", "fim_pre", "fim_suf", "fim_mid", "fim_pad", "fim_rep")
    ids = [getattr(llama_cpp, f"llama_vocab_{name}")(vocab) for name in getters]
    flags = [llama_cpp.llama_vocab_get_add_bos(vocab), llama_cpp.llama_vocab_get_add_eos(vocab)]
    digest.update(repr((ids, flags)).encode())


def _special_texts(vocab: object) -> list[str]:
    """Every control or user-defined token's text, embedded in ordinary text."""
    texts = []
    for token in range(llama_cpp.llama_vocab_n_tokens(vocab)):
        if llama_cpp.llama_vocab_is_control(vocab, token):
            text = llama_cpp.llama_vocab_get_text(vocab, token).decode("utf-8", errors="replace")
            texts.append(f"before{text}after {text} end")
    return texts[:512]


def _tokenize(vocab: object, text: str, add_special: bool, parse_special: bool) -> list[int]:
    data = text.encode()
    capacity = len(data) + 16
    tokens = (llama_cpp.llama_token * capacity)()
    count = llama_cpp.llama_tokenize(vocab, data, len(data), tokens, capacity, add_special, parse_special)
    assert count >= 0
    return list(tokens[:count])


@pytest.mark.parametrize("model_id", [SMOLLM, GEMMA])
def test_the_vocabulary_is_the_one_the_stock_engine_loads(model_id: str) -> None:
    assert vocabulary_fingerprint(model_path(model_id)) == STOCK_VOCABULARY[model_id]


def greedy_logits(model: LlamaModel, prompts: list[list[int]], steps: int) -> list[list[np.ndarray]]:
    """Each prompt evaluated, then `steps` greedy tokens decoded for all of them in one batch per step: the
    logits every sequence got at every step."""
    logits: list[list[np.ndarray]] = [[] for _ in prompts]
    for sequence, tokens in enumerate(prompts):
        last = len(tokens) - 1
        model.decode([(token, position, sequence, position == last) for position, token in enumerate(tokens)])
        logits[sequence].append(model.logits(last).copy())
    positions = [len(tokens) for tokens in prompts]
    for _ in range(steps):
        nexts = [int(rows[-1].argmax()) for rows in logits]
        model.decode([(token, positions[s], s, True) for s, token in enumerate(nexts)])
        for sequence in range(len(prompts)):
            logits[sequence].append(model.logits(sequence).copy())
            positions[sequence] += 1
    return logits


def test_q4_1_sequences_get_bitwise_the_same_logits_alone_and_in_a_batch() -> None:
    model = LlamaModel(str(model_path(SMOLLM)), ContextShape(kv_cells=4096, sequences=8, threads=2))
    try:
        prompts = [model.tokenize(text, True) for text in PROMPTS]
        together = greedy_logits(model, prompts, steps=12)
        for sequence, tokens in enumerate(prompts):
            model.clear()
            [alone] = greedy_logits(model, [tokens], steps=12)
            for step, (a, b) in enumerate(zip(alone, together[sequence], strict=True)):
                assert np.array_equal(a, b), f"prompt {sequence} differs at step {step}"
    finally:
        model.close()


def rows_of(model: LlamaModel, history: list[int], new: list[int], padding: list[int]) -> list[np.ndarray]:
    """The logits rows of `new`, evaluated in one batch after `history` and followed in it by `padding`."""
    model.clear()
    if history:
        model.decode([(token, position, 0, False) for position, token in enumerate(history)])
    start = len(history)
    batch = [*new, *padding]
    model.decode([(token, start + i, 0, i < len(new)) for i, token in enumerate(batch)])
    return [model.logits(i).copy() for i in range(len(new))]


@pytest.mark.parametrize(("cached", "new_rows"), [(0, 16), (0, 40), (300, 16), (300, 33), (300, 63)])
def test_a_short_one_sequence_batch_gets_what_its_rows_get_in_a_tile(cached: int, new_rows: int) -> None:
    model = LlamaModel(str(model_path(SMOLLM)), ContextShape(kv_cells=4096, sequences=8, threads=2))
    try:
        text = " ".join(PROMPTS * 20)
        ids = model.tokenize(text, True)
        history, new, padding = ids[:cached], ids[cached : cached + new_rows], ids[cached + new_rows :]
        short = rows_of(model, history, new, [])
        in_tile = rows_of(model, history, new, padding[: 64 - new_rows])
        for row, (a, b) in enumerate(zip(short, in_tile, strict=True)):
            assert np.array_equal(a, b), f"{new_rows} new rows over {cached}: row {row} differs"
    finally:
        model.close()


def decode_logits(
    model: LlamaModel,
    history: list[int],
    other: list[int],
    steps: int,
    other_decodes: bool = False,
    other_first: bool = True,
) -> list[np.ndarray]:
    """The logits of `steps` one-token decodes of a sequence after `history`, with `other` cells of a second sequence
    evaluated before it (so that they lie before its cells) or, without `other_first`, after its history (between
    its history and its new tokens). The second sequence is idle or, with `other_decodes`, decodes a token in the
    same batch at each step. Both histories are fed 8 rows at a time: below 16 rows a batch takes the row kernel,
    whose result does not depend on where its cells lie (tiles of cells do)."""
    model.clear()
    order = ((1, other), (0, history)) if other_first else ((0, history), (1, other))
    for sequence, tokens in order:
        for start in range(0, len(tokens), 8):
            chunk = tokens[start : start + 8]
            model.decode([(token, start + i, sequence, False) for i, token in enumerate(chunk)])
    logits = []
    for step in range(steps):
        batch = [(history[step], len(history) + step, 0, True)]
        if other_decodes:
            batch.append((other[step], len(other) + step, 1, True))
        model.decode(batch)
        logits.append(model.logits(0).copy())
    return logits


def assert_bitwise_equal(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    for step, (x, y) in enumerate(zip(a, b, strict=True)):
        assert np.array_equal(x.view(np.uint32), y.view(np.uint32)), f"step {step} differs"


@pytest.mark.parametrize(
    ("threads", "history", "idle", "idle_first"),
    [
        (2, 100, 200, True),
        (2, 300, 200, True),
        (2, 300, 700, True),
        (2, 300, 700, False),
        (4, 600, 300, True),
    ],
)
def test_a_decode_gets_the_same_logits_whatever_else_the_cache_holds(
    threads: int, history: int, idle: int, idle_first: bool
) -> None:
    """Patch 0006: a one-row decode visits the cells it sees. Stock splits it over all cells once they span 512, so
    the cells of an idle conversation moved where the split cut the sequence's own cells, and the last bits with it.
    SmolLM2's 9 heads share evenly among 2 threads (the row kernel), not among 4 (a split of the visible cells)."""
    model = LlamaModel(str(model_path(SMOLLM)), ContextShape(kv_cells=4096, sequences=8, threads=threads))
    try:
        ids = model.tokenize(" ".join(PROMPTS * 20), True)
        alone = decode_logits(model, ids[:history], [], steps=6)
        assert_bitwise_equal(
            alone, decode_logits(model, ids[:history], ids[-idle:], steps=6, other_first=idle_first)
        )
    finally:
        model.close()


def test_a_long_decode_gets_the_same_logits_alone_as_in_a_batch() -> None:
    """Patch 0006: when its heads share evenly among the threads (SmolLM2: 9 heads on 2), a one-row decode takes the
    row kernel that each row of a batch takes. Stock split it over the cells once they spanned 512."""
    model = LlamaModel(str(model_path(SMOLLM)), ContextShape(kv_cells=4096, sequences=8, threads=2))
    try:
        ids = model.tokenize(" ".join(PROMPTS * 20), True)
        history, other = ids[:300], ids[-300:]
        alone = decode_logits(model, history, other, steps=6)
        assert_bitwise_equal(alone, decode_logits(model, history, other, steps=6, other_decodes=True))
    finally:
        model.close()
