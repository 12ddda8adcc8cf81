"""A worker process seen from the server: spawn it, stream generations or ask embeddings of it, cancel, stop or
kill it."""

import asyncio
import contextlib
import contextvars
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from cirrus.errors import (
    CapacityExceeded,
    CirrusError,
    InternalError,
    InvalidInput,
    RequestTimeout,
    WorkerCrashed,
    WorkerStartFailed,
)
from cirrus.runtime.channel import TransportClosed
from cirrus.runtime.embedding import EmbeddingInput, Embeddings
from cirrus.runtime.events import Finished, GenerationEvent, TextDelta
from cirrus.runtime.frames import Frame
from cirrus.runtime.params import GenerationInput, Usage
from cirrus.runtime.transport import SocketTransport, Transport

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadOptions:
    path: str
    n_ctx: int
    n_threads: int
    parallel: int = 1
    kv_cells: int = 0
    chat_template: str | None = None
    embeddings: bool = False  # an embeddings engine (n_ctx: the most tokens one text may have)


@dataclass(frozen=True)
class EngineInfo:
    n_ctx: int
    has_chat_template: bool
    load_s: float


# glibc: serve large allocations from the heap rather than fresh mmaps, and never give freed heap back, so memory
# faulted in ahead of time is what llama.cpp's buffers later reuse.
_KEEP_HEAP = {"MALLOC_MMAP_THRESHOLD_": str(1 << 32), "MALLOC_TRIM_THRESHOLD_": str(1 << 32)}
# A worker uses numpy for argmax only; OpenBLAS's own thread pool, started when numpy is imported, would only
# compete with llama.cpp's threads for the cores.
_ONE_BLAS_THREAD = {"OPENBLAS_NUM_THREADS": "1"}


def _timed_out() -> RequestTimeout:
    return RequestTimeout("the request ran past its execution time limit and was cancelled")


def _worker_error(frame: Frame) -> CirrusError:
    message = str(frame.get("message", "worker error"))
    if frame.get("kind") == "invalid_input":
        return InvalidInput(message, param=frame.get("param"))
    if frame.get("kind") == "capacity":
        return CapacityExceeded(message, retry_after_s=1.0)
    return InternalError(message)


class WorkerProcess:
    def __init__(self, proc: asyncio.subprocess.Process, transport: Transport) -> None:
        self._proc = proc
        self._transport = transport
        self._streams: dict[str, asyncio.Queue[Frame | CirrusError]] = {}
        self._exit_callbacks: list[Callable[[], None]] = []
        self._dead = False
        self._reader: asyncio.Task[None] | None = None
        self._pending_cancels: set[asyncio.Task[None]] = set()
        self._notices: set[asyncio.Task[None]] = set()
        self.cancel_grace_s = 2.0
        self.process_s = 0.0
        self.info: EngineInfo | None = None

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def alive(self) -> bool:
        return not self._dead

    @property
    def exited(self) -> bool:
        return self._proc.returncode is not None

    def on_exit(self, callback: Callable[[], None]) -> None:
        self._exit_callbacks.append(callback)

    @classmethod
    async def start(cls, heap_bytes: int = 0) -> "WorkerProcess":
        """A process with the engine imported, waiting to be told which model to load.

        With heap_bytes, the process faults in that much heap and keeps it: creating a model's KV cache then
        takes 8 ms instead of 100 (SmolLM2, 8192 cells), since the pages are already mapped.
        """
        parent_sock, child_sock = socket.socketpair()
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "cirrus.runtime.worker",
            str(child_sock.fileno()),
            str(heap_bytes),
            pass_fds=(child_sock.fileno(),),
            stdin=asyncio.subprocess.DEVNULL,
            env={**os.environ, **_ONE_BLAS_THREAD, **(_KEEP_HEAP if heap_bytes else {})},
        )
        child_sock.close()
        worker = cls(proc, await SocketTransport.over(parent_sock))
        try:
            frame = await worker._transport.recv()
        except TransportClosed as exc:
            await worker.kill()
            raise WorkerStartFailed(f"a worker process exited while starting: {exc}") from exc
        if frame["type"] != "idle":
            await worker.kill()
            raise WorkerStartFailed(f"a worker process said {frame['type']!r} instead of 'idle'")
        return worker

    @property
    def loaded(self) -> bool:
        return self.info is not None

    def set_threads(self, threads: int) -> None:
        """Tell the engine how many threads to decode with from its next step (fire and forget)."""
        if not self._dead:
            task = asyncio.get_running_loop().create_task(
                self._send_quietly({"type": "threads", "n": threads})
            )
            self._notices.add(task)
            task.add_done_callback(self._notices.discard)

    async def _send_quietly(self, frame: Frame) -> None:
        with contextlib.suppress(WorkerCrashed):
            await self._send(frame)

    def cold_start_phases(self) -> dict[str, float]:
        """Seconds spent getting a process (near zero when a spare was ready) and loading the model in it."""
        return {"process_s": self.process_s, "load_s": self.info.load_s if self.info else 0.0}

    async def load(self, options: LoadOptions, timeout_s: float) -> None:
        """Load the model; on any failure the process is killed and WorkerStartFailed raised."""
        try:
            async with asyncio.timeout(timeout_s):
                self.info = await self._load(options)
        except (TimeoutError, TransportClosed, CirrusError) as exc:
            await self.kill()
            if isinstance(exc, WorkerStartFailed):
                raise
            raise WorkerStartFailed(
                f"the worker for {Path(options.path).name} did not start: {exc!r}"
            ) from exc
        # A fresh context: the reader outlives the request that started the worker, so it must not log as it.
        self._reader = asyncio.create_task(
            self._read_frames(), name=f"worker-{self.pid}-reader", context=contextvars.Context()
        )

    async def _load(self, options: LoadOptions) -> EngineInfo:
        started = time.perf_counter()
        await self._transport.send({"type": "load", "options": asdict(options)})
        frame = await self._transport.recv()
        if frame["type"] != "ready":
            raise WorkerStartFailed(f"the model failed to load: {frame.get('message', frame)}")
        return EngineInfo(
            int(frame["n_ctx"]), bool(frame["has_chat_template"]), time.perf_counter() - started
        )

    async def _read_frames(self) -> None:
        try:
            while True:
                frame = await self._transport.recv()
                queue = self._streams.get(str(frame.get("id")))
                if queue is not None:
                    queue.put_nowait(frame)
        except TransportClosed:
            pass
        finally:
            self._mark_dead()

    def _mark_dead(self) -> None:
        if self._dead:
            return
        self._dead = True
        for queue in self._streams.values():
            queue.put_nowait(WorkerCrashed("the model's worker process exited during the request"))
        for callback in self._exit_callbacks:
            callback()

    async def generate(
        self, request_id: str, inputs: GenerationInput, deadline: float | None = None
    ) -> AsyncIterator[GenerationEvent]:
        """Stream one generation. Leaving early (break, cancel, error) cancels it in the worker; past the
        deadline (on the loop's clock) it raises RequestTimeout. One timer per request, not one per token."""
        queue, timer = self._open_stream(request_id, deadline)
        finished = False
        try:
            await self._send({"type": "generate", "id": request_id, "input": inputs.to_frame()})
            while not finished:
                event = self._event(await queue.get())
                finished = isinstance(event, Finished)
                yield event
        except CirrusError:
            finished = True
            raise
        finally:
            self._close_stream(request_id, queue, timer, settled=finished)

    def _event(self, item: Frame | CirrusError) -> GenerationEvent:
        if isinstance(item, CirrusError):
            raise item
        if item["type"] == "text":
            return TextDelta(item["text"])
        if item["type"] == "finished":
            usage = Usage(
                int(item["prompt_tokens"]),
                int(item["completion_tokens"]),
                int(item["cached_tokens"]),
                int(item.get("reasoning_tokens", 0)),
            )
            return Finished(str(item["finish_reason"]), usage)
        raise _worker_error(item)

    async def embed(
        self, request_id: str, inputs: EmbeddingInput, deadline: float | None = None
    ) -> Embeddings:
        """One request's embeddings. Leaving early (cancel, deadline) cancels it in the worker if not started."""
        queue, timer = self._open_stream(request_id, deadline)
        answered = False
        try:
            await self._send({"type": "embed", "id": request_id, "input": inputs.to_frame()})
            item = await queue.get()
            answered = not isinstance(item, CirrusError)
            return _embeddings(item)
        finally:
            self._close_stream(request_id, queue, timer, settled=answered or self._dead)

    def _open_stream(
        self, request_id: str, deadline: float | None
    ) -> tuple[asyncio.Queue[Frame | CirrusError], asyncio.TimerHandle | None]:
        """The queue the reader delivers this request's frames to, and one timer for its deadline."""
        if self._dead:
            raise WorkerCrashed("the model's worker process is not running")
        queue: asyncio.Queue[Frame | CirrusError] = asyncio.Queue()
        self._streams[request_id] = queue
        timer = None
        if deadline is not None:
            timer = asyncio.get_running_loop().call_at(deadline, queue.put_nowait, _timed_out())
        return queue, timer

    def _close_stream(
        self,
        request_id: str,
        queue: asyncio.Queue[Frame | CirrusError],
        timer: asyncio.TimerHandle | None,
        settled: bool,
    ) -> None:
        """A request the worker has finished is forgotten; one left early is cancelled in the worker."""
        if timer is not None:
            timer.cancel()
        if settled:
            self._streams.pop(request_id, None)
        else:
            self._abandon(request_id, queue)

    def _abandon(self, request_id: str, queue: asyncio.Queue[Frame | CirrusError]) -> None:
        task = asyncio.get_running_loop().create_task(self._cancel_and_settle(request_id, queue))
        self._pending_cancels.add(task)
        task.add_done_callback(self._pending_cancels.discard)

    async def _cancel_and_settle(self, request_id: str, queue: asyncio.Queue[Frame | CirrusError]) -> None:
        """Tell the worker to stop; a worker that does not confirm within the grace period is killed."""
        try:
            await self._send({"type": "cancel", "id": request_id})
            async with asyncio.timeout(self.cancel_grace_s):
                while True:
                    item = await queue.get()
                    if isinstance(item, CirrusError) or item["type"] in ("finished", "failed", "embedded"):
                        return
        except (TimeoutError, CirrusError):
            log.warning("worker %s did not stop request %s in time; killing it", self.pid, request_id)
            await self.kill()
        finally:
            self._streams.pop(request_id, None)

    async def settled(self) -> None:
        """Wait until every cancelled generation has been confirmed stopped (or the worker killed)."""
        while self._pending_cancels:
            await asyncio.gather(*list(self._pending_cancels), return_exceptions=True)

    async def _send(self, frame: Frame) -> None:
        try:
            await self._transport.send(frame)
        except TransportClosed as exc:
            self._mark_dead()
            raise WorkerCrashed("the model's worker process is not running") from exc

    async def stop(self, grace_s: float = 5.0) -> None:
        with contextlib.suppress(WorkerCrashed):
            await self._send({"type": "shutdown"})
        try:
            await asyncio.wait_for(self._proc.wait(), grace_s)
        except TimeoutError:
            await self.kill()
        await self._close()

    async def kill(self) -> None:
        if self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(signal.SIGKILL)
            await self._proc.wait()
        await self._close()

    async def _close(self) -> None:
        await self._transport.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)
        self._mark_dead()

    def rss_bytes(self) -> int | None:
        return _rss_bytes(self.pid) if not self._dead else None


def _embeddings(item: Frame | CirrusError) -> Embeddings:
    if isinstance(item, CirrusError):
        raise item
    if item["type"] == "embedded":
        return Embeddings([list(map(float, v)) for v in item["vectors"]], int(item["prompt_tokens"]))
    if item["type"] == "failed":
        raise _worker_error(item)
    raise InternalError(f"the worker answered an embeddings request with {item['type']!r}")


def _rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
