"""A llama.cpp context driven through explicit batches, as Cirrus's worker drives it (for logits.py, speed_worker.py).

Import this only after library.reexec_with: importing llama_cpp loads the engine's libraries.
"""

import ctypes
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import llama_cpp
import numpy as np
import numpy.typing as npt
from cli_support import CheckError

FLASH_ATTN_TYPES = {
    "enabled": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    "disabled": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED,
    "auto": llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,
}
BATCH_CAPACITY = 512
THREADS = 2

Logits = npt.NDArray[np.float32]


def ignore_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    """llama.cpp logs to stderr unless given a callback; like Cirrus's workers, the checks drop its log."""


DROP_LOG = llama_cpp.llama_log_callback(ignore_log)  # a module global: the C side keeps only a pointer


class Entry(NamedTuple):
    """One token of a batch: which sequence it extends, at which position, and whether its logits are kept."""

    token: int
    pos: int
    seq: int
    wants_logits: bool


@dataclass(frozen=True)
class ContextShape:
    """Context parameters as Cirrus sets them: a unified KV cache shared by n_seq_max sequences."""

    n_ctx: int
    n_seq_max: int = 16
    flash_attn: str = "enabled"


class BatchSession:
    """One model and one context; decodes batches of Entry and hands back their logits rows."""

    def __init__(self, model_path: str, shape: ContextShape) -> None:
        llama_cpp.llama_log_set(DROP_LOG, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_default_params()
        self.model = llama_cpp.llama_model_load_from_file(model_path.encode(), params)
        if not self.model:
            raise CheckError(f"llama.cpp could not load {model_path}")
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(self.model)))
        self.ctx = llama_cpp.llama_init_from_model(self.model, context_params(shape))
        if not self.ctx:
            raise CheckError(f"llama.cpp could not create a context for {model_path} ({shape})")
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.batch = llama_cpp.llama_batch_init(BATCH_CAPACITY, 0, 1)

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self.memory, True)

    def forget_from(self, seq: int, pos: int) -> None:
        """Drops sequence seq's cache cells from position pos on."""
        llama_cpp.llama_memory_seq_rm(self.memory, seq, pos, -1)

    def run(self, entries: Sequence[Entry]) -> float:
        """Decodes one batch; returns the seconds llama_decode took."""
        if not 0 < len(entries) <= BATCH_CAPACITY:
            raise CheckError(f"a batch holds 1-{BATCH_CAPACITY} tokens, not {len(entries)}")
        batch = self.batch
        for i, entry in enumerate(entries):
            batch.token[i] = entry.token
            batch.pos[i] = entry.pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = entry.seq
            batch.logits[i] = entry.wants_logits
        batch.n_tokens = len(entries)
        start = time.perf_counter()
        status = int(llama_cpp.llama_decode(self.ctx, batch))
        elapsed = time.perf_counter() - start
        if status != 0:
            raise CheckError(f"llama_decode returned {status}")
        return elapsed

    def decode(self, entries: Sequence[Entry]) -> Logits:
        """Decodes one batch; returns the logits rows of the entries that want them, in batch order."""
        self.run(entries)
        rows = [self.logits_row(i) for i, entry in enumerate(entries) if entry.wants_logits]
        return np.stack(rows)

    def logits_row(self, index: int) -> Logits:
        row: Logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.ctx, index), (self.n_vocab,))
        return row.copy()


def context_params(shape: ContextShape) -> llama_cpp.llama_context_params:
    params: llama_cpp.llama_context_params = llama_cpp.llama_context_default_params()
    params.n_ctx = shape.n_ctx
    params.n_batch = params.n_ubatch = BATCH_CAPACITY
    params.n_seq_max = shape.n_seq_max
    params.n_threads = params.n_threads_batch = THREADS
    params.kv_unified = True
    params.flash_attn_type = FLASH_ATTN_TYPES[shape.flash_attn]
    return params


def random_tokens(rng: np.random.RandomState, count: int, n_vocab: int) -> list[int]:
    """count token ids drawn from the vocabulary's first 32,000 (skipping the first 10, mostly special)."""
    return [int(t) for t in rng.randint(10, min(n_vocab, 32000), size=count)]


def sequence_entries(prompts: Sequence[Sequence[int]], every_position: bool) -> list[Entry]:
    """One batch holding each prompt as its own sequence, with logits at every position or only the last."""
    return [
        Entry(token, pos, seq, every_position or pos == len(prompt) - 1)
        for seq, prompt in enumerate(prompts)
        for pos, token in enumerate(prompt)
    ]
