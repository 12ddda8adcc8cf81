"""A thin, typed layer over llama.cpp's C API (through llama-cpp-python's ctypes bindings).

One model, one context whose KV cache is shared by several sequences, one batch buffer. Runs inside a worker
process only; the server never imports it.
"""

import ctypes
from dataclasses import dataclass
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp import _logger

from cirrus.runtime.host_tier import State
from cirrus.runtime.params import SamplingParams

PENALTY_WINDOW = 64
RANDOM_SEED = 0xFFFFFFFF


class LlamaError(RuntimeError):
    pass


@dataclass(frozen=True)
class ContextShape:
    kv_cells: int
    sequences: int
    threads: int
    batch_tokens: int = 512
    embeddings: bool = False  # an embeddings context: pooled vectors per sequence instead of logits
    flash_attention: bool = True  # off only to compare (bench/kv_span.py): batches are faster with it


class LlamaModel:
    def __init__(self, path: str, shape: ContextShape) -> None:
        _logger.set_verbose(False)
        llama_cpp.llama_backend_init()
        model_params = llama_cpp.llama_model_default_params()
        # Mapped, not read into memory: instances of one model share its weights in the page cache. (AUTO would
        # map too, on a CPU; the binding has no `use_mmap` field any more, and setting one did nothing.)
        model_params.load_mode = llama_cpp.LLAMA_LOAD_MODE_MMAP
        self._model = llama_cpp.llama_model_load_from_file(path.encode(), model_params)
        if not self._model:
            raise LlamaError(f"llama.cpp could not load {path}")
        self.vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self.vocab))
        self._ctx = llama_cpp.llama_init_from_model(self._model, _context_params(shape))
        if not self._ctx:
            raise LlamaError("llama.cpp could not create a context (out of memory?)")
        self._memory = llama_cpp.llama_get_memory(self._ctx)  # NULL for encoders such as BERT: no KV cache
        # llama.cpp caps the batch at the context size; a larger batch would abort the process.
        self.batch_tokens = int(llama_cpp.llama_n_batch(self._ctx))
        self._batch = llama_cpp.llama_batch_init(self.batch_tokens, 0, 1)
        self._piece = ctypes.create_string_buffer(64)
        self._candidates: _Candidates | None = None  # built on first use: JSON mode near its token budget
        self._adapter: Any = None  # the LoRA adapter applied to the context, if any

    # -- tokens -----------------------------------------------------------------------------------------------

    def tokenize(self, text: str, add_special: bool) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 16
        buffer = (llama_cpp.llama_token * capacity)()
        count = llama_cpp.llama_tokenize(self.vocab, data, len(data), buffer, capacity, add_special, True)
        if count < 0:
            raise LlamaError(f"tokenization needs {-count} tokens, more than the {capacity} expected")
        return list(buffer[:count])

    def single_token(self, text: str) -> int | None:
        """The token that is exactly `text` (a special marker such as `<think>`), or None."""
        tokens = self.tokenize(text, False)
        return tokens[0] if len(tokens) == 1 and self.token_text(tokens[0]) == text else None

    def piece(self, token: int) -> bytes:
        # special=True: a family's markers (<think>, <tool_call>, ...) are special tokens the output parsers
        # must see; end-of-generation tokens never get here (the scheduler stops on them by id).
        size = llama_cpp.llama_token_to_piece(self.vocab, token, self._piece, len(self._piece), 0, True)
        if size < 0:  # the buffer was too small; it says how much is needed
            self._piece = ctypes.create_string_buffer(-size)
            size = llama_cpp.llama_token_to_piece(self.vocab, token, self._piece, -size, 0, True)
        return self._piece.raw[:size]

    def token_text(self, token: int) -> str:
        if token < 0:
            return ""
        text: bytes = llama_cpp.llama_vocab_get_text(self.vocab, token)
        return text.decode("utf-8", errors="replace")

    def metadata(self, key: str) -> str | None:
        size = 1 << 16
        while True:
            buffer = ctypes.create_string_buffer(size)
            length = int(llama_cpp.llama_model_meta_val_str(self._model, key.encode(), buffer, size))
            if length < 0:
                return None
            if length < size:
                return buffer.value.decode("utf-8", errors="replace")
            size = length + 1

    def bos(self) -> int:
        return int(llama_cpp.llama_vocab_bos(self.vocab))

    def eos(self) -> int:
        return int(llama_cpp.llama_vocab_eos(self.vocab))

    def is_end(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))

    # -- the KV cache -----------------------------------------------------------------------------------------

    def forget(self, sequence: int, keep: int) -> None:
        """Drop a sequence's cached positions from `keep` on."""
        llama_cpp.llama_memory_seq_rm(self._memory, sequence, keep, -1)

    def share(self, source: int, target: int, length: int) -> None:
        """Make target's first `length` positions the same cells as source's (no copy in a unified cache)."""
        llama_cpp.llama_memory_seq_cp(self._memory, source, target, 0, length)

    def save(self, sequence: int) -> bytearray | None:
        """A sequence's cells (positions, keys, values) as llama.cpp serialises them, to restore later; None if
        llama.cpp could not. Written in place: a conversation's state is tens of MB, and a copy of it delays the
        next request."""
        size = int(llama_cpp.llama_state_seq_get_size(self._ctx, sequence))
        state = bytearray(size)
        written = int(llama_cpp.llama_state_seq_get_data(self._ctx, _bytes_view(state), size, sequence))
        return state if written == size else None

    def restore(self, sequence: int, state: State) -> bool:
        """Put a saved sequence back under the given id (which must hold nothing). False if the cells do not
        fit in the KV cache now."""
        read = llama_cpp.llama_state_seq_set_data(self._ctx, _bytes_view(state), len(state), sequence)
        return int(read) > 0

    # -- LoRA adapters ----------------------------------------------------------------------------------------

    def load_adapter(self, path: str) -> Any:
        """A LoRA adapter (GGUF) loaded for this model; LlamaError if llama.cpp refuses it (a wrong base)."""
        handle = llama_cpp.llama_adapter_lora_init(self._model, path.encode())
        if not handle:
            raise LlamaError(f"llama.cpp could not load the LoRA adapter {path} for this model")
        return handle

    def free_adapter(self, handle: Any) -> None:
        if handle is self._adapter:
            self.use_adapter(None)
        llama_cpp.llama_adapter_lora_free(handle)

    def use_adapter(self, handle: Any) -> None:
        """Apply one adapter (None: none) to the context's next decodes: llama.cpp applies adapters per context."""
        if handle is self._adapter:
            return
        if handle is None:
            status = llama_cpp.llama_set_adapters_lora(self._ctx, None, 0, None)
        else:
            adapters = (llama_cpp.llama_adapter_lora_p_ctypes * 1)(handle)
            scales = (ctypes.c_float * 1)(1.0)
            status = llama_cpp.llama_set_adapters_lora(self._ctx, adapters, 1, scales)
        if status != 0:
            raise LlamaError(f"llama.cpp could not apply the LoRA adapter (status {status})")
        self._adapter = handle

    # -- decoding ---------------------------------------------------------------------------------------------

    def decode(self, entries: list[tuple[int, int, int, bool]]) -> int:
        """Decode one batch of (token, position, sequence, wants_logits). 0 on success, 1 if the KV cache is full."""
        batch = self._batch
        for index, (token, position, sequence, logits) in enumerate(entries):
            batch.token[index] = token
            batch.pos[index] = position
            batch.n_seq_id[index] = 1
            batch.seq_id[index][0] = sequence
            batch.logits[index] = logits
        batch.n_tokens = len(entries)
        status = int(llama_cpp.llama_decode(self._ctx, batch))
        if status < 0:
            raise LlamaError(f"llama_decode failed with status {status}")
        return status

    def clear(self) -> None:
        """Forget every sequence (an embeddings batch starts from nothing)."""
        if self._memory:
            llama_cpp.llama_memory_clear(self._memory, True)

    # -- embeddings -------------------------------------------------------------------------------------------

    @property
    def embedding_size(self) -> int:
        return int(llama_cpp.llama_model_n_embd(self._model))

    @property
    def trained_context(self) -> int:
        return int(llama_cpp.llama_model_n_ctx_train(self._model))

    @property
    def pooled(self) -> bool:
        return int(llama_cpp.llama_pooling_type(self._ctx)) not in (
            llama_cpp.LLAMA_POOLING_TYPE_NONE,
            llama_cpp.LLAMA_POOLING_TYPE_RANK,
        )

    def sequence_embedding(self, sequence: int) -> list[float]:
        """The pooled embedding of one sequence of the last decoded batch, as the model's pooling made it."""
        pointer = llama_cpp.llama_get_embeddings_seq(self._ctx, sequence)
        if not pointer:
            raise LlamaError(f"llama.cpp has no pooled embedding for sequence {sequence}")
        return [float(value) for value in pointer[: self.embedding_size]]

    def set_threads(self, threads: int) -> None:
        llama_cpp.llama_set_n_threads(self._ctx, threads, threads)

    def logits(self, index: int) -> "np.ndarray[Any, np.dtype[np.float32]]":
        """The logits of the index-th token of the last decoded batch (a view: valid until the next decode)."""
        pointer = llama_cpp.llama_get_logits_ith(self._ctx, index)
        return np.ctypeslib.as_array(pointer, shape=(self.n_vocab,))

    def sample(self, sampler: "Sampler", index: int) -> int:
        if sampler.plain_greedy:
            # llama_sampler_sample copies every logit into a candidates array first (3 MB per token for
            # Gemma's 262,144-token vocabulary); argmax over the logits picks the same token (the first maximum).
            return int(self.logits(index).argmax())
        return int(llama_cpp.llama_sampler_sample(sampler.handle, self._ctx, index))

    def propose(self, sampler: "Sampler", index: int) -> int:
        """The token `sample` would pick, without telling the sampler (its grammar, its penalties): the caller
        then accepts it or another (`Sampler.accept`)."""
        if self._candidates is None:
            self._candidates = _Candidates(self.n_vocab)
        return self._candidates.select(sampler.handle, self.logits(index))

    def close(self) -> None:
        llama_cpp.llama_batch_free(self._batch)
        llama_cpp.llama_free(self._ctx)
        llama_cpp.llama_model_free(self._model)


def _context_params(shape: ContextShape) -> Any:
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = shape.kv_cells
    params.n_batch = shape.batch_tokens
    params.n_ubatch = shape.batch_tokens
    params.n_seq_max = shape.sequences
    params.n_threads = shape.threads
    params.n_threads_batch = shape.threads
    params.kv_unified = True  # one pool of cells for all sequences, so a shared prefix is stored once
    params.flash_attn_type = (
        llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
        if shape.flash_attention
        else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    )
    if shape.embeddings:
        params.embeddings = True
        params.pooling_type = llama_cpp.LLAMA_POOLING_TYPE_UNSPECIFIED  # the GGUF's own (MiniLM: mean)
    return params


class _Candidates:
    """Every token with its logit, as `llama_sampler_sample` lays them out before the chain picks one."""

    def __init__(self, n_vocab: int) -> None:
        dtype = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)], align=True)
        self._data = np.zeros(n_vocab, dtype=dtype)
        self._ids = np.arange(n_vocab, dtype=np.intc)
        self._pointer = self._data.ctypes.data_as(llama_cpp.llama_token_data_p)

    def select(self, chain: Any, logits: "np.ndarray[Any, np.dtype[np.float32]]") -> int:
        self._data["id"] = self._ids  # the chain sorts and cuts the array in place
        self._data["logit"] = logits
        self._data["p"] = 0.0
        array = llama_cpp.llama_token_data_array(self._pointer, len(self._ids), -1, False)
        llama_cpp.llama_sampler_apply(chain, ctypes.byref(array))
        return int(array.data[array.selected].id)


class GrammarError(LlamaError):
    """llama.cpp could not parse a request's grammar."""


class Sampler:
    """One request's sampling chain: penalties, a grammar when the output is constrained, then greedy, or top-k,
    top-p, temperature and a seeded draw. The grammar comes before any cut, so a cut never leaves only tokens
    the grammar forbids."""

    def __init__(self, params: SamplingParams, n_vocab: int, vocab: Any = None) -> None:
        self.handle = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        repeat = params.repetition_penalty if params.repetition_penalty > 0 else 1.0
        neutral = repeat == 1.0 and params.frequency_penalty == 0 and params.presence_penalty == 0
        self.plain_greedy = params.temperature <= 0 and neutral and not params.grammar
        self._add(
            llama_cpp.llama_sampler_init_penalties(
                n_vocab, PENALTY_WINDOW, repeat, params.frequency_penalty, params.presence_penalty
            )
        )
        self._grammar: Any = None
        if params.grammar:  # needs the model's vocabulary (`LlamaModel.vocab`)
            try:
                self._grammar = _grammar_stage(vocab, params.grammar)
                self._add(self._grammar)
            except BaseException:
                self.close()  # the chain and the stages already in it are native memory
                raise
        if params.temperature <= 0:
            self._add(llama_cpp.llama_sampler_init_greedy())
            return
        self._add(llama_cpp.llama_sampler_init_top_k(params.top_k))
        self._add(llama_cpp.llama_sampler_init_top_p(params.top_p, 1))
        self._add(llama_cpp.llama_sampler_init_temp(params.temperature))
        self._add(llama_cpp.llama_sampler_init_dist(params.seed if params.seed is not None else RANDOM_SEED))

    def remember(self, tokens: list[int]) -> None:
        """Let the penalties (the chain's first stage) see the end of the prompt, as llama.cpp's own server
        does. Only the penalties: a grammar stage fed prompt tokens would reject them and abort the process."""
        penalties = llama_cpp.llama_sampler_chain_get(self.handle, 0)
        for token in tokens[-PENALTY_WINDOW:]:
            llama_cpp.llama_sampler_accept(penalties, token)

    def allows(self, token: int) -> bool:
        """Whether the grammar (if any) accepts `token` next; accepting one it refuses would abort llama.cpp."""
        if self._grammar is None:
            return True
        data = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, 0.0, 0.0))
        array = llama_cpp.llama_token_data_array(data, 1, -1, False)
        llama_cpp.llama_sampler_apply(self._grammar, ctypes.byref(array))
        return bool(np.isfinite(data[0].logit))

    def accept(self, token: int) -> None:
        """Tell every stage that `token` was picked (after `LlamaModel.propose`, or a token written for it)."""
        llama_cpp.llama_sampler_accept(self.handle, token)

    def _add(self, stage: Any) -> None:
        llama_cpp.llama_sampler_chain_add(self.handle, stage)

    def close(self) -> None:
        llama_cpp.llama_sampler_free(self.handle)


def _grammar_stage(vocab: Any, grammar: str) -> Any:
    if vocab is None:
        raise GrammarError("a grammar needs the model's vocabulary")
    stage = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"), b"root")
    if not stage:
        raise GrammarError("llama.cpp could not parse the output grammar")
    return stage


def _bytes_view(state: State) -> Any:
    """A pointer to a state's bytes for llama.cpp, without a copy: writable into a bytearray."""
    if isinstance(state, bytearray):
        return (ctypes.c_uint8 * len(state)).from_buffer(state)
    return ctypes.cast(ctypes.c_char_p(state), ctypes.POINTER(ctypes.c_uint8))
