"""A worker process seen from the server: spawn it, stream generations, ask embeddings or prompt token counts of
it, cancel, stop or kill it, and watch that it still answers."""

import asyncio
import contextlib
import contextvars
import itertools
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
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
from cirrus.runtime.liveness import Liveness
from cirrus.runtime.params import GenerationInput
from cirrus.runtime.progress import Progress, usage_of
from cirrus.runtime.transport import SocketTransport, Transport

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadOptions:
    path: str
    n_ctx: int
    n_threads: int
    parallel: int = 1
    kv_cells: int = 0
    host_cache_tokens: int = 0  # the prefix cache's host tier (runtime.host_tier); 0: none
    prefix_cache_dir: str | None = None  # where the prefix cache outlives the instance (runtime.disk_tier)
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
# What ends a request in the worker: after one of these it holds nothing of that request.
ENDINGS = frozenset({"finished", "failed", "embedded", "counted"})
# Watchdog defaults; the launcher sets the configured ones (settings.worker_heartbeat_timeout_s, worker_stall_s).
HEARTBEAT_TIMEOUT_S = 3.0
STALL_S = 30.0


def _timed_out() -> RequestTimeout:
    return RequestTimeout("the request ran past its execution time limit and was cancelled")


def _worker_error(frame: Frame) -> CirrusError:
    message = str(frame.get("message", "worker error"))
    if frame.get("kind") == "invalid_input":
        return InvalidInput(message, param=frame.get("param"))
    if frame.get("kind") == "capacity":
        return CapacityExceeded(message, retry_after_s=1.0)
    return InternalError(message)


@dataclass(eq=False)
class _Stream:
    """One request's frames from the worker, and what they told so far.

    `wire_id` names it to the worker: unique per worker, so two requests that share a caller's request id (any
    client may reuse one, on purpose or not) never share a stream, nor one's cancel stop the other. It begins
    with the caller's id, which the worker's logs then show; `request_id` is that id, for the server's."""

    wire_id: str
    request_id: str
    progress: Progress
    queue: "asyncio.Queue[Frame | CirrusError]" = field(default_factory=asyncio.Queue)
    ended: asyncio.Event = field(default_factory=asyncio.Event)  # the worker is done with it, or is gone
    timer: asyncio.TimerHandle | None = None

    def deliver(self, frame: Frame) -> None:
        self.progress.see(frame)
        if frame["type"] in ENDINGS:
            self.ended.set()
        self.queue.put_nowait(frame)

    def end(self, error: CirrusError) -> None:
        self.ended.set()
        self.queue.put_nowait(error)


class WorkerProcess:
    def __init__(self, proc: asyncio.subprocess.Process, transport: Transport) -> None:
        self._proc = proc
        self._transport = transport
        self._streams: dict[str, _Stream] = {}  # by wire id
        self._wire_ids = itertools.count(1)
        self._cancels: dict[_Stream, asyncio.Task[None]] = {}
        self._exit_callbacks: list[Callable[[], None]] = []
        self._dead = False
        self._reader: asyncio.Task[None] | None = None
        self._ping: asyncio.Task[None] | None = None
        self._notices: set[asyncio.Task[None]] = set()
        self._liveness = Liveness(HEARTBEAT_TIMEOUT_S, STALL_S, time.monotonic)
        self._condemned = False  # judged hung: it is being killed
        self.cancel_grace_s = 2.0
        self.process_s = 0.0
        self.info: EngineInfo | None = None

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def alive(self) -> bool:
        """Running as far as anyone can tell: neither its connection nor its exit status says otherwise."""
        return not self._dead and self._proc.returncode is None

    @property
    def exited(self) -> bool:
        return self._proc.returncode is not None

    @property
    def responsive(self) -> bool:
        """Alive and answering heartbeats; a worker that is not gets no new request."""
        return self.alive and not self._condemned and not self._liveness.late

    def on_exit(self, callback: Callable[[], None]) -> None:
        self._exit_callbacks.append(callback)

    def set_watchdog(self, timeout_s: float, stall_s: float) -> None:
        """How long a worker may leave heartbeats unanswered, or requests without an engine step, before it is
        judged hung (see `runtime/liveness.py`)."""
        self._liveness = Liveness(timeout_s, stall_s, time.monotonic)

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
        except BaseException:  # the cold start that wanted it was cancelled: no process is left behind
            await asyncio.shield(worker.kill())
            raise
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
        """Load the model; on any failure the process is killed and WorkerStartFailed raised. Cancelled (the
        request that started it reached its deadline, or its client left), the process is killed too, and the
        cancel goes on: a half-loaded model left running would hold memory the pool counts as free."""
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
        except BaseException:
            await asyncio.shield(self.kill())
            raise
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

    # -- the watchdog -----------------------------------------------------------------------------------------

    def watch(self) -> str | None:
        """One watchdog tick (about a second apart): why this worker must be replaced, or None; then the next
        heartbeat goes out. A ping is a few dozen bytes each way, answered by the worker's reader thread."""
        if self._dead or self._condemned or self._reader is None:
            return None
        reason = self._liveness.check(busy=self._busy())
        self._condemned = reason is not None
        if reason is None and (self._ping is None or self._ping.done()):
            self._liveness.pinged()
            self._ping = asyncio.get_running_loop().create_task(
                self._send_quietly({"type": "ping"}), context=contextvars.Context()
            )
        return reason

    def _busy(self) -> bool:
        return any(not stream.ended.is_set() for stream in self._streams.values())

    # -- frames from the worker -------------------------------------------------------------------------------

    async def _read_frames(self) -> None:
        try:
            while True:
                frame = await self._transport.recv()
                if frame["type"] == "pong":
                    self._liveness.answered(int(frame.get("steps", 0)))
                    continue
                stream = self._streams.get(str(frame.get("id")))
                if stream is not None:
                    stream.deliver(frame)
        except TransportClosed:
            pass
        finally:
            self._mark_dead()

    def _mark_dead(self) -> None:
        if self._dead:
            return
        self._dead = True
        for stream in self._streams.values():
            stream.end(WorkerCrashed("the model's worker process exited during the request"))
        for callback in self._exit_callbacks:
            callback()

    # -- requests ---------------------------------------------------------------------------------------------

    async def generate(
        self,
        request_id: str,
        inputs: GenerationInput,
        deadline: float | None = None,
        progress: Progress | None = None,
    ) -> AsyncIterator[GenerationEvent]:
        """Stream one generation. Leaving early (break, cancel, error) cancels it in the worker; at the deadline
        (on the loop's clock) it raises RequestTimeout and the worker is told to stop at once. One timer per
        request, not one per token. `progress` receives what the worker reports, for billing."""
        stream = self._open_stream(request_id, deadline, progress)
        try:
            await self._send_request(
                stream, {"type": "generate", "id": stream.wire_id, "input": inputs.to_frame()}, deadline
            )
            while True:
                event = self._event(await stream.queue.get())
                if event is not None:
                    yield event
                    if isinstance(event, Finished):
                        return
        finally:
            self._close_stream(stream)

    def _event(self, item: Frame | CirrusError) -> GenerationEvent | None:
        if isinstance(item, CirrusError):
            raise item
        if item["type"] == "text":
            return TextDelta(item["text"])
        if item["type"] == "finished":
            stop = item.get("stop_sequence")
            return Finished(
                str(item["finish_reason"]), usage_of(item), stop if isinstance(stop, str) else None
            )
        if item["type"] == "started":
            return None
        raise _worker_error(item)

    async def embed(
        self,
        request_id: str,
        inputs: EmbeddingInput,
        deadline: float | None = None,
        progress: Progress | None = None,
    ) -> Embeddings:
        """One request's embeddings. Leaving early (cancel, deadline) cancels it in the worker if not started."""
        return _embeddings(await self._one_answer("embed", request_id, inputs.to_frame(), deadline, progress))

    async def count(
        self,
        request_id: str,
        inputs: GenerationInput,
        deadline: float | None = None,
        progress: Progress | None = None,
    ) -> int:
        """The prompt tokens a generation of `inputs` would feed the engine, rendered and tokenized as it would be
        (runtime/counting.py); nothing is generated. Leaving early (cancel, deadline) cancels it in the worker."""
        return _counted(await self._one_answer("count", request_id, inputs.to_frame(), deadline, progress))

    async def _one_answer(
        self,
        kind: str,
        request_id: str,
        frame_input: Frame,
        deadline: float | None,
        progress: Progress | None,
    ) -> Frame | CirrusError:
        """Send one request frame and wait for its single answer, past `started` frames (progress, for billing)."""
        stream = self._open_stream(request_id, deadline, progress)
        try:
            await self._send_request(
                stream, {"type": kind, "id": stream.wire_id, "input": frame_input}, deadline
            )
            item = await stream.queue.get()
            while not isinstance(item, CirrusError) and item["type"] == "started":
                item = await stream.queue.get()
            return item
        finally:
            self._close_stream(stream)

    def _open_stream(self, request_id: str, deadline: float | None, progress: Progress | None) -> _Stream:
        """Where the reader delivers this request's frames, and one timer for its deadline."""
        if not self.alive:
            raise WorkerCrashed("the model's worker process is not running")
        wire_id = f"{request_id}#{next(self._wire_ids)}"
        stream = _Stream(wire_id, request_id, progress if progress is not None else Progress())
        stream.progress.wire_id = wire_id
        self._streams[wire_id] = stream
        if deadline is not None:
            stream.timer = asyncio.get_running_loop().call_at(deadline, self._expire, stream)
        return stream

    async def _send_request(self, stream: _Stream, frame: Frame, deadline: float | None) -> None:
        """Write the request, waiting no longer than its deadline: a stopped worker's full socket buffer would
        otherwise hold the caller until the heartbeat watchdog killed the worker. Past it the caller gets its
        408 and the stream stays unsettled, so closing it sends the cancel (and kills a worker that takes
        neither within the cancel grace)."""
        try:
            async with asyncio.timeout_at(deadline):
                await self._send(frame)
        except TimeoutError:
            raise _timed_out() from None
        stream.progress.sent = True

    def _expire(self, stream: _Stream) -> None:
        """The deadline passed: the caller hears it now, and the worker is told to stop now, whether or not the
        caller is still reading (a slow reader must not keep the worker decoding)."""
        stream.queue.put_nowait(_timed_out())
        self._abandon(stream)

    def _close_stream(self, stream: _Stream) -> None:
        """A request the worker has finished is forgotten; one left early is cancelled in the worker."""
        if stream.timer is not None:
            stream.timer.cancel()
        if stream.ended.is_set():
            self._forget(stream)
        else:
            self._abandon(stream)

    def _forget(self, stream: _Stream) -> None:
        if self._streams.get(stream.wire_id) is stream:
            del self._streams[stream.wire_id]

    # -- cancelling -------------------------------------------------------------------------------------------

    def _abandon(self, stream: _Stream) -> None:
        if stream.ended.is_set() or stream in self._cancels:
            return
        task = asyncio.get_running_loop().create_task(self._cancel_and_settle(stream))
        self._cancels[stream] = task
        task.add_done_callback(lambda _: self._cancels.pop(stream, None))

    async def _cancel_and_settle(self, stream: _Stream) -> None:
        """Tell the worker to stop; it confirms within one engine step (its `finished` frame then carries the
        real token counts). A worker that does not confirm within the grace period is killed, and the pool
        replaces it; the grace covers writing the cancel too, which a stopped worker's full socket buffer
        would hold up."""
        try:
            async with asyncio.timeout(self.cancel_grace_s):
                await self._send({"type": "cancel", "id": stream.wire_id})
                await stream.ended.wait()
        except TimeoutError:
            log.warning(
                "worker %s did not stop request %s within %.1fs; killing it",
                self.pid,
                stream.request_id,
                self.cancel_grace_s,
            )
            await self.kill()
        except WorkerCrashed:
            pass  # gone already: nothing is left to stop
        finally:
            self._forget(stream)

    def cancelling(self, stream_id: str) -> bool:
        return any(stream.wire_id == stream_id for stream in self._cancels)

    async def settled(self, stream_id: str | None = None) -> None:
        """Wait until a cancelled stream (by its wire id, `Progress.wire_id`; without one, every stream) has been
        confirmed stopped, or the worker killed. Keyed by stream, not by the caller's request id, which two
        requests may share. Being cancelled while waiting leaves the cancel running."""
        tasks = [
            task for stream, task in self._cancels.items() if stream_id is None or stream.wire_id == stream_id
        ]
        if tasks:
            await asyncio.wait(tasks)

    async def _send(self, frame: Frame) -> None:
        try:
            await self._transport.send(frame)
        except TransportClosed as exc:
            self._mark_dead()
            raise WorkerCrashed("the model's worker process is not running") from exc

    # -- stopping ---------------------------------------------------------------------------------------------

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


def _counted(item: Frame | CirrusError) -> int:
    if isinstance(item, CirrusError):
        raise item
    if item["type"] == "counted":
        return int(item["prompt_tokens"])
    if item["type"] == "failed":
        raise _worker_error(item)
    raise InternalError(f"the worker answered a token count with {item['type']!r}")


def _rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
