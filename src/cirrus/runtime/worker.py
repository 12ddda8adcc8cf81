"""Entry point of a worker process: `python -m cirrus.runtime.worker FD`.

One engine per process. A reader thread takes frames off the socket (so a cancel arrives while the main thread
is generating); the main thread runs generations one after another and streams text frames back.
"""

import os
import queue
import signal
import socket
import sys
import threading
from typing import Any

from cirrus.runtime.frames import Frame
from cirrus.runtime.params import GenerationInput
from cirrus.runtime.transport import BlockingChannel, TransportClosed


class Worker:
    def __init__(self, channel: BlockingChannel) -> None:
        self._channel = channel
        self._inbox: queue.Queue[Frame | None] = queue.Queue()
        self._cancelled: set[str] = set()
        self._lock = threading.Lock()

    def serve(self) -> None:
        engine = self._load()
        if engine is None:
            return
        threading.Thread(target=self._read_loop, name="frame-reader", daemon=True).start()
        while (frame := self._inbox.get()) is not None:
            self._generate(engine, frame)

    def _load(self) -> Any:
        frame = self._channel.recv()
        try:
            from cirrus.runtime.engine import LlamaEngine

            options = frame["options"]
            engine = LlamaEngine(
                options["path"], options["n_ctx"], options["n_threads"], options["chat_template"]
            )
        except Exception as exc:  # any load failure is reported to the server, which decides what to do
            self._channel.send({"type": "load_failed", "message": f"{type(exc).__name__}: {exc}"})
            return None
        self._channel.send(
            {"type": "ready", "n_ctx": engine.n_ctx, "has_chat_template": engine.has_chat_template}
        )
        return engine

    def _read_loop(self) -> None:
        try:
            while True:
                frame = self._channel.recv()
                if frame["type"] == "generate":
                    self._inbox.put(frame)
                elif frame["type"] == "cancel":
                    with self._lock:
                        self._cancelled.add(str(frame["id"]))
                elif frame["type"] == "shutdown":
                    self._inbox.put(None)
                    return
        except (TransportClosed, OSError):
            os._exit(0)  # the server is gone: nobody is left to answer

    def _is_cancelled(self, request_id: str) -> bool:
        with self._lock:
            return request_id in self._cancelled

    def _generate(self, engine: Any, frame: Frame) -> None:
        from cirrus.runtime.engine import EngineInputError

        request_id = str(frame["id"])
        if self._is_cancelled(request_id):
            self._finish(request_id, "cancelled", 0, 0)
            return
        try:
            inputs = GenerationInput.from_frame(frame["input"])
            result = engine.generate(
                inputs,
                emit=lambda text: self._channel.send({"type": "text", "id": request_id, "text": text}),
                cancelled=lambda: self._is_cancelled(request_id),
            )
        except EngineInputError as exc:
            self._fail(request_id, "invalid_input", str(exc), exc.param)
        except Exception as exc:  # reported per request; the worker keeps serving
            self._fail(request_id, "internal", f"{type(exc).__name__}: {exc}", None)
        else:
            self._finish(request_id, result.finish_reason, result.prompt_tokens, result.completion_tokens)
        finally:
            with self._lock:
                self._cancelled.discard(request_id)

    def _finish(self, request_id: str, reason: str, prompt_tokens: int, completion_tokens: int) -> None:
        self._channel.send(
            {
                "type": "finished",
                "id": request_id,
                "finish_reason": reason,
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
            }
        )

    def _fail(self, request_id: str, kind: str, message: str, param: str | None) -> None:
        self._channel.send(
            {"type": "failed", "id": request_id, "kind": kind, "message": message, "param": param}
        )


def main(argv: list[str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the server stops us itself
    sock = socket.socket(fileno=int(argv[1]))
    Worker(BlockingChannel(sock)).serve()


if __name__ == "__main__":
    main(sys.argv)
