"""The measurements speed_worker.py makes, in the process that loads the build to measure.

Import this only after LLAMA_CPP_LIB_PATH and LD_LIBRARY_PATH name that build: importing llama_cpp loads it.
"""

import ctypes
import time
from collections.abc import Callable
from functools import partial

import llama_cpp
import numpy as np
from batches import DROP_LOG, BatchSession, ContextShape, Entry, random_tokens, sequence_entries
from cli_support import CheckError

BATCHES = (1, 2, 4, 8, 16)
PROMPT_CHUNKS = {64: 5, 512: 3}  # tokens: measured repetitions
HELD = 60  # tokens each of the 16 sequences holds while decode steps are timed
STEPS = 12
WARMUP = 2

Samples = dict[str, list[float]]


def batch_speed(model: str) -> Samples:
    """Prompt chunks in a fresh sequence, then decode steps of B sequences that each hold a HELD-token prompt
    (a step decodes one token in each of B sequences, logits for all); WARMUP runs of each are not kept."""
    session = BatchSession(model, ContextShape(n_ctx=8192))
    rng = np.random.RandomState(7)
    return {**prompt_speed(session, rng), **decode_speed(session, rng)}


def prompt_speed(session: BatchSession, rng: np.random.RandomState) -> Samples:
    samples: Samples = {}
    for length, repetitions in PROMPT_CHUNKS.items():
        times = []
        for _ in range(WARMUP + repetitions):
            session.clear()
            prompt = random_tokens(rng, length, session.n_vocab)
            times.append(session.run(sequence_entries([prompt], every_position=False)))
        samples[f"prompt{length}"] = times[WARMUP:]
    return samples


def decode_speed(session: BatchSession, rng: np.random.RandomState) -> Samples:
    session.clear()
    for seq in range(max(BATCHES)):
        prompt = random_tokens(rng, HELD, session.n_vocab)
        session.run([Entry(token, pos, seq, False) for pos, token in enumerate(prompt)])
    samples: Samples = {}
    for batch in BATCHES:
        times = [session.run(decode_step(rng, session.n_vocab, batch, s)) for s in range(WARMUP + STEPS)]
        samples[f"decode{batch}"] = times[WARMUP:]
        for seq in range(batch):
            session.forget_from(seq, HELD)
    return samples


def decode_step(rng: np.random.RandomState, n_vocab: int, batch: int, step: int) -> list[Entry]:
    return [
        Entry(token, HELD + step, seq, True) for seq, token in enumerate(random_tokens(rng, batch, n_vocab))
    ]


def load_speed(model: str, n_ctx: int) -> Samples:
    """A vocab-only load, a second one (warm code and allocator), a full load (use_mmap, as Cirrus loads) and
    llama_init_from_model on it; wall time, and the loading thread's CPU time (steadier on a shared machine)."""
    llama_cpp.llama_log_set(DROP_LOG, ctypes.c_void_p(0))
    llama_cpp.llama_backend_init()
    samples: Samples = {}
    for name, vocab_only in (("vocab_only", True), ("vocab_only_2nd", True), ("full", False)):
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = vocab_only
        params.use_mmap = True
        loaded = timed(samples, name, partial(llama_cpp.llama_model_load_from_file, model.encode(), params))
        if name != "full":
            llama_cpp.llama_model_free(loaded)
    ctx = timed(
        samples, "init_from_model", lambda: llama_cpp.llama_init_from_model(loaded, load_context(n_ctx))
    )
    llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(loaded)
    return samples


def timed(samples: Samples, name: str, call: Callable[[], object]) -> object:
    """call(), recording its wall and thread CPU seconds under name; a null result is an error."""
    wall, cpu = time.perf_counter(), time.thread_time()
    result = call()
    samples[name] = [time.perf_counter() - wall]
    samples[f"{name} (cpu)"] = [time.thread_time() - cpu]
    if not result:
        raise CheckError(f"llama.cpp failed in {name}")
    return result


def load_context(n_ctx: int) -> llama_cpp.llama_context_params:
    params: llama_cpp.llama_context_params = llama_cpp.llama_context_default_params()
    params.n_ctx = n_ctx
    params.n_threads = params.n_threads_batch = 2
    params.kv_unified = True
    params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
    return params
