"""A worker connection without a worker process: the server's end of the transport wired to a scripted engine on
the same event loop, and a process handle whose SIGKILL closes it. For the server side's pure logic (streams,
deadlines, cancels, heartbeats, usage); the real worker is proven by the integration and fault tests."""

import asyncio
import itertools
import signal
from dataclasses import dataclass, field
from typing import cast

from cirrus.runtime.channel import TransportClosed
from cirrus.runtime.frames import Frame
from cirrus.runtime.process import LoadOptions, WorkerProcess

_pids = itertools.count(5000)
PROMPT_TOKENS = 5
CACHED_TOKENS = 2
OPTIONS = LoadOptions(path="/x.gguf", n_ctx=512, n_threads=1)


@dataclass
class Script:
    """How the engine behaves; change it while a test runs."""

    tokens: int = 3  # text frames per generation, one per token
    step_s: float = 0.01  # seconds per token
    answers_pings: bool = True
    confirms_cancel: bool = True
    frozen: bool = False  # stopped: answers nothing and makes no progress (SIGSTOP)
    stuck: bool = False  # main thread stuck in the engine: pings answered, no progress
    dies_on_generate: bool = False  # the process exits as a request reaches it, before admitting it
    dies_after_start: bool = False  # the process exits right after admitting a request
    loads: bool = True  # False: the model's load is never answered (a cold start that takes its time)
    sends_block: bool = (
        False  # its socket buffer is full: every send waits until it clears or the process dies
    )


@dataclass
class FakeEngineTransport:
    script: Script = field(default_factory=Script)
    sent: list[Frame] = field(default_factory=list)
    steps: int = 0
    _inbox: "asyncio.Queue[Frame | None]" = field(default_factory=asyncio.Queue)
    _cancelled: set[str] = field(default_factory=set)
    _tasks: set["asyncio.Task[None]"] = field(default_factory=set)
    closed: bool = False

    async def send(self, frame: Frame) -> None:
        while self.script.sends_block and not self.closed:  # noqa: ASYNC110
            await asyncio.sleep(0.005)
        if self.closed:
            raise TransportClosed("worker connection is closed")
        self.sent.append(frame)
        self._handle(frame)

    async def recv(self) -> Frame:
        frame = await self._inbox.get()
        if frame is None:
            raise TransportClosed("worker connection closed")
        return frame

    async def close(self) -> None:
        self.die()

    def die(self) -> None:
        if not self.closed:
            self.closed = True
            for task in self._tasks:
                task.cancel()
            self._inbox.put_nowait(None)

    def sent_types(self) -> list[str]:
        return [str(frame["type"]) for frame in self.sent]

    def _reply(self, frame: Frame) -> None:
        if not self.closed:
            self._inbox.put_nowait(frame)

    def _handle(self, frame: Frame) -> None:
        kind = frame["type"]
        if kind == "load" and self.script.loads:
            self._reply({"type": "ready", "n_ctx": 512, "has_chat_template": True})
        elif kind == "ping" and self.script.answers_pings and not self.script.frozen:
            self._reply({"type": "pong", "steps": self.steps})
        elif kind in ("generate", "embed"):
            task = asyncio.get_running_loop().create_task(self._run(str(frame["id"]), kind))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif kind == "cancel":
            self._cancelled.add(str(frame["id"]))

    async def _run(self, request_id: str, kind: str) -> None:
        if self.script.dies_on_generate:
            self.die()
            return
        if kind == "embed":
            await self._embed(request_id)
            return
        await self._until_thawed()
        self._reply(
            {
                "type": "started",
                "id": request_id,
                "prompt_tokens": PROMPT_TOKENS,
                "cached_tokens": CACHED_TOKENS,
            }
        )
        if self.script.dies_after_start:
            await asyncio.sleep(0)
            self.die()
            return
        for count in range(1, self.script.tokens + 1):
            await asyncio.sleep(self.script.step_s)
            await self._until_thawed()
            if request_id in self._cancelled:
                if self.script.confirms_cancel:
                    self._finished(request_id, "cancelled", count - 1)
                return
            self.steps += 1
            self._reply({"type": "text", "id": request_id, "text": f"t{count} ", "tokens": count})
        self._finished(request_id, "length", self.script.tokens)

    async def _embed(self, request_id: str) -> None:
        await asyncio.sleep(self.script.step_s)
        await self._until_thawed()
        self._reply({"type": "embedded", "id": request_id, "vectors": [[1.0, 0.0]], "prompt_tokens": 7})

    async def _until_thawed(self) -> None:
        # The script is plain data a test flips at any moment; polling it keeps the fake that simple.
        while self.script.frozen or self.script.stuck:  # noqa: ASYNC110
            await asyncio.sleep(0.005)

    def _finished(self, request_id: str, reason: str, completion: int) -> None:
        self._reply(
            {
                "type": "finished",
                "id": request_id,
                "finish_reason": reason,
                "prompt_tokens": PROMPT_TOKENS,
                "completion_tokens": completion,
                "cached_tokens": CACHED_TOKENS,
                "reasoning_tokens": 0,
            }
        )


class FakeProcess:
    """What WorkerProcess uses of an asyncio subprocess: SIGKILL closes the connection, as a real exit would."""

    def __init__(self, transport: FakeEngineTransport) -> None:
        self.pid = next(_pids)
        self.returncode: int | None = None
        self.signals: list[int] = []
        self._transport = transport
        self._exited = asyncio.Event()

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)
        if sig == signal.SIGKILL:
            self.returncode = -sig
            self._transport.die()
            self._exited.set()

    async def wait(self) -> int:
        await self._exited.wait()
        assert self.returncode is not None
        return self.returncode


def idle_worker(script: Script | None = None) -> tuple[WorkerProcess, FakeEngineTransport, FakeProcess]:
    """A WorkerProcess over a fake engine, waiting to be told which model to load."""
    transport = FakeEngineTransport(script or Script())
    process = FakeProcess(transport)
    return WorkerProcess(cast(asyncio.subprocess.Process, process), transport), transport, process


async def loaded_worker(
    script: Script | None = None,
) -> tuple[WorkerProcess, FakeEngineTransport, FakeProcess]:
    """A WorkerProcess over a fake engine, with its model loaded (its frame reader running)."""
    worker, transport, process = idle_worker(script)
    await worker.load(OPTIONS, timeout_s=5)
    return worker, transport, process
