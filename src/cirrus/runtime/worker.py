"""Entry point of a worker process: `python -m cirrus.runtime.worker FD`.

One model per process. The engine is imported as the process starts, before the server says which model to load,
so a process started ahead of need (a spare) pays only for mapping weights when a cold start comes. A reader
thread takes frames off the socket, so a cancel arrives while the main thread is decoding; the main thread runs
the engine (the batch scheduler for generation and token counts, the embedding engine for embeddings) one step
at a time while there is work, and once idle for a moment saves ahead what the prefix cache will move out
(`runtime.idle_work`). The reader thread also answers the server's heartbeat (`ping`) with how many steps
the main thread has completed, so the server can tell a stopped process (no answer) from a stuck engine (no
progress).
"""

import ctypes
import logging
import os
import queue
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Protocol

import llama_cpp
import numpy as np
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from cirrus.observability.logs import configure_logging
from cirrus.runtime.channel import BlockingChannel, TransportClosed
from cirrus.runtime.disk_tier import read_index, write_snapshot
from cirrus.runtime.embedding import BATCH_SEQUENCES
from cirrus.runtime.encoder import EmbeddingEngine
from cirrus.runtime.frames import Frame
from cirrus.runtime.host_tier import HostTier
from cirrus.runtime.idle_work import IdleWork
from cirrus.runtime.llama import ContextShape, LlamaModel
from cirrus.runtime.load_ahead import LoadAhead
from cirrus.runtime.prefix_cache import PrefixCache, idle_token_budget, sequence_ids
from cirrus.runtime.prompts import PromptBuilder
from cirrus.runtime.scheduler import BatchScheduler

log = logging.getLogger(__name__)
SHUTDOWN: Frame = {"type": "shutdown"}
REQUESTS = frozenset({"generate", "embed", "count"})
ENDINGS = frozenset({"finished", "failed", "embedded", "counted"})
# How long a thread holding the GIL may keep another waiting for it. Python's default, 5 ms, is paid by a cold
# start: while the load-ahead thread compiles the chat template, the main thread, back from each short llama.cpp
# call before the load, waits up to that long for the GIL. 0.2 ms took the load's start from 4.9 to 1.4 ms
# after the load frame (bench/RESULTS.md). Once loaded, the frame reader waits on its socket: the main thread
# has the GIL to itself, and a frame that wakes the reader is read sooner.
GIL_SWITCH_INTERVAL_S = 0.0002


class Engine(Protocol):
    """What the main loop drives: requests in, one step of work at a time."""

    @property
    def busy(self) -> bool: ...

    def submit(self, frame: Frame) -> None: ...

    def step(self) -> None: ...

    def work_while_idle(self) -> bool:
        """One piece of work that waits for the engine to be idle; False when none is left."""
        ...

    def set_threads(self, threads: int) -> None: ...


class Worker:
    def __init__(self, channel: BlockingChannel) -> None:
        self._channel = channel
        self._inbox: queue.Queue[Frame] = queue.Queue()
        self._cancelled: set[str] = set()
        # Requests received and not yet ended: a cancel that crosses its request's last frame (the server's
        # deadline fired as the worker finished) is dropped rather than remembered forever.
        self._open: set[str] = set()
        self._lock = threading.Lock()
        self._threads: int | None = None
        # Engine steps completed (for embeddings, batches encoded: one step is a whole request); written by the
        # main thread, read by the reader thread.
        self._steps = 0
        # Where the prefix cache is kept when this worker stops, and read back by the next one (disk_tier).
        self._prefixes: tuple[Path, PrefixCache, list[Path]] | None = None
        self._idle = IdleWork(time.monotonic)  # when idle time goes to saving ahead (runtime.idle_work)

    def serve(self) -> None:
        engine = self._load()
        if engine is None:
            return
        threading.Thread(target=self._read_loop, name="frame-reader", daemon=True).start()
        while self._take_frames(engine, self._idle.wait_s(engine.busy, engine.work_while_idle)):
            threads, self._threads = self._threads, None
            if threads is not None:
                engine.set_threads(threads)
            if engine.busy:
                engine.step()
                self._count_step()
        self._keep_prefixes()

    def _keep_prefixes(self) -> None:
        if self._prefixes is not None:
            folder, cache, read = self._prefixes
            try:
                write_snapshot(folder, ((s.tokens, s.salt, s.state) for s in cache.snapshot()), read)
            except OSError:
                log.exception("could not keep the prefix cache in %s", folder)

    def _count_step(self) -> None:
        self._steps += 1

    def _take_frames(self, engine: Engine, wait_s: float | None) -> bool:
        """Hand new requests to the scheduler, waiting up to wait_s for the first (None: until one comes). False
        once told to shut down."""
        while True:
            try:
                frame = self._inbox.get(block=wait_s != 0.0, timeout=wait_s)
            except queue.Empty:
                return True
            if frame is SHUTDOWN:
                return False
            engine.submit(frame)
            wait_s = 0.0

    def _load(self) -> Engine | None:
        frame = self._channel.recv()
        if frame["type"] != "load":
            return None
        try:
            if frame["options"].get("embeddings"):
                return self._build_embeddings(frame["options"])
            return self._build(frame["options"])
        except Exception as exc:  # any load failure is reported to the server, which decides what to do
            self._channel.send({"type": "load_failed", "message": f"{type(exc).__name__}: {exc}"})
            return None

    def _build(self, options: dict[str, Any]) -> BatchScheduler:
        slots, context = int(options["parallel"]), int(options["n_ctx"])
        shape = ContextShape(
            kv_cells=int(options["kv_cells"]),
            sequences=sequence_ids(slots),
            threads=int(options["n_threads"]),
        )
        folder = options.get("prefix_cache_dir")
        kept = Path(folder) if folder and int(options.get("host_cache_tokens", 0)) > 0 else None
        ahead = LoadAhead(options.get("chat_template"), kept).start()
        model = LlamaModel(str(options["path"]), shape)
        ahead.model_loaded()
        template = options.get("chat_template") or model.metadata("tokenizer.chat_template")
        prompts = PromptBuilder(model, template, ahead.formatter)
        self._channel.send(
            {"type": "ready", "n_ctx": context, "has_chat_template": prompts.has_chat_template}
        )
        cache = self._prefix_cache(model, slots, options, ahead)
        return BatchScheduler(model, prompts, slots, context, self._send, self._is_cancelled, cache)

    def _prefix_cache(
        self, model: LlamaModel, slots: int, options: dict[str, Any], ahead: LoadAhead
    ) -> PrefixCache:
        """The prefix cache, with what an earlier instance of the model left on disk in its host tier (the
        states read during the load as bytes, the others as the files they are in)."""
        tokens = int(options.get("host_cache_tokens", 0))
        host = HostTier(tokens) if tokens > 0 else None
        idle = idle_token_budget(int(options["kv_cells"]))
        cache = PrefixCache(model, sequence_ids(slots), host, idle_tokens=idle)
        if host is not None and ahead.folder is not None:
            stored = ahead.stored if ahead.stored is not None else read_index(ahead.folder)
            for entry in stored:
                host.put(entry.tokens, entry.salt, ahead.states.get(entry.path, entry.path))
            self._prefixes = (ahead.folder, cache, [entry.path for entry in stored])
        return cache

    def _build_embeddings(self, options: dict[str, Any]) -> EmbeddingEngine:
        """A context as wide as one text may be long: the batch holds any single text whole, as an encoder's
        attention over a text needs it in one micro-batch."""
        context = int(options["n_ctx"])
        shape = ContextShape(
            kv_cells=context,
            sequences=BATCH_SEQUENCES,
            threads=int(options["n_threads"]),
            batch_tokens=context,
            embeddings=True,
        )
        model = LlamaModel(str(options["path"]), shape)
        max_tokens = min(context, model.trained_context, model.batch_tokens)
        engine = EmbeddingEngine(model, max_tokens, self._send, self._is_cancelled, self._count_step)
        self._channel.send(
            {
                "type": "ready",
                "n_ctx": max_tokens,
                "has_chat_template": False,
                "dimensions": model.embedding_size,
            }
        )
        return engine

    def _send(self, frame: Frame) -> None:
        if frame["type"] in ENDINGS:
            with self._lock:
                self._cancelled.discard(str(frame["id"]))
                self._open.discard(str(frame["id"]))
        self._channel.send(frame)

    def _read_loop(self) -> None:
        try:
            while True:
                frame = self._channel.recv()
                if frame["type"] in REQUESTS:
                    with self._lock:
                        self._open.add(str(frame["id"]))
                    self._inbox.put(frame)
                elif frame["type"] == "cancel":
                    self._cancel(str(frame["id"]))
                elif frame["type"] == "ping":
                    self._channel.send({"type": "pong", "steps": self._steps})
                elif frame["type"] == "threads":
                    self._threads = int(frame["n"])
                elif frame["type"] == "shutdown":
                    self._inbox.put(SHUTDOWN)
                    return
        except (TransportClosed, OSError):
            os._exit(0)  # the server is gone: nobody is left to answer

    def _cancel(self, request_id: str) -> None:
        with self._lock:
            if request_id in self._open:
                self._cancelled.add(request_id)

    def _is_cancelled(self, request_id: str) -> bool:
        with self._lock:
            return request_id in self._cancelled


def main(argv: list[str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the server stops us itself
    configure_logging(logging.INFO)  # JSON lines on stderr, which the server's log receives as they are
    sock = socket.socket(fileno=int(argv[1]))
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    prefault_heap(int(argv[2]) if len(argv) > 2 else 0)
    warm_up()
    channel = BlockingChannel(sock)
    try:
        channel.send({"type": "idle"})  # ready ahead: a cold start that takes us pays for none of the above
    except OSError:
        os._exit(0)  # the server stopped while we were starting: nobody is left to serve
    Worker(channel).serve()


def warm_up() -> None:
    """Pay now what a process pays once, on its first model, whichever model that is: llama.cpp's backend
    initialisation (1.4 ms), numpy's first view of a C array, as the logits are read (0.9 ms), and Jinja's first
    template (about 1 ms). Measured in a spare here; nothing of a model is loaded."""
    llama_cpp.llama_backend_init()
    cell = (ctypes.c_float * 1)()
    np.ctypeslib.as_array(ctypes.cast(cell, ctypes.POINTER(ctypes.c_float)), shape=(1,)).argmax()
    chat = Jinja2ChatFormatter(template="{{ messages[0]['content'] }}", eos_token="", bos_token="")
    chat(messages=[{"role": "user", "content": ""}])


def prefault_heap(size: int) -> None:
    """Touch `size` bytes of heap and free them; with the server's malloc settings they stay mapped."""
    if size > 0:
        block = bytearray(size)
        del block


if __name__ == "__main__":
    main(sys.argv)
