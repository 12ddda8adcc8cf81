"""The embeddings engine inside a worker: one request at a time, its texts packed into batches with one sequence
per text, each text's pooled vector read back and L2-normalised.

A text longer than the model reads is refused, never truncated: a silently shortened text would give a vector
for text the caller did not send. (Workers AI does not document what it does; OpenAI refuses too.)

One step is a whole request, up to 100 texts, so the batch is the unit of progress: each encoded batch is
reported to the worker's step counter (a long request is not a stalled engine), and after each batch cancelled
requests are confirmed at once, the running one included, rather than when their turn comes (a cancel the
server does not see confirmed within its grace gets the whole worker killed).
"""

import logging
from collections import deque
from collections.abc import Callable

from cirrus.runtime.embedding import BATCH_SEQUENCES, EmbeddingInput, normalised, pack
from cirrus.runtime.frames import Frame
from cirrus.runtime.llama import LlamaError, LlamaModel

log = logging.getLogger(__name__)
Send = Callable[[Frame], None]


def _no_progress_report() -> None:
    return None


class TextTooLong(ValueError):
    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


class _Cancelled(Exception):
    """The running request was cancelled between two of its batches, after reading `tokens`."""

    def __init__(self, tokens: int) -> None:
        super().__init__(tokens)
        self.tokens = tokens


class EmbeddingEngine:
    """Serves `embed` frames with the same calls the worker makes of the batch scheduler."""

    def __init__(
        self,
        model: LlamaModel,
        max_text_tokens: int,
        send: Send,
        is_cancelled: Callable[[str], bool],
        progressed: Callable[[], None] = _no_progress_report,
    ) -> None:
        if not model.pooled:
            raise LlamaError("the model has no pooling type, so it gives no embedding per text")
        self._model = model
        self.max_text_tokens = max_text_tokens
        self._send = send
        self._is_cancelled = is_cancelled
        self._progressed = progressed  # one batch encoded: what the watchdog counts as a step
        self._waiting: deque[Frame] = deque()

    @property
    def busy(self) -> bool:
        return bool(self._waiting)

    def set_threads(self, threads: int) -> None:
        self._model.set_threads(threads)

    def submit(self, frame: Frame) -> None:
        self._waiting.append(frame)

    def work_while_idle(self) -> bool:
        return False

    def step(self) -> None:
        self._confirm_cancelled()
        if not self._waiting:
            return
        frame = self._waiting.popleft()
        request_id = str(frame["id"])
        if frame["type"] != "embed":  # the service checks the model's task; this worker could not generate
            self._fail(request_id, "internal", "this worker serves an embeddings model only", None)
            return
        try:
            vectors, tokens = self.embed(EmbeddingInput.from_frame(frame["input"]), request_id)
        except _Cancelled as cancelled:
            self._send_cancelled(request_id, cancelled.tokens)
        except TextTooLong as exc:
            self._fail(request_id, "invalid_input", str(exc), exc.param)
        except Exception as exc:  # reported to this request alone; the worker keeps serving
            log.exception("embedding request %s failed", request_id, extra={"request_id": request_id})
            self._fail(request_id, "internal", f"{type(exc).__name__}: {exc}", None)
        else:
            self._send({"type": "embedded", "id": request_id, "vectors": vectors, "prompt_tokens": tokens})

    def embed(self, inputs: EmbeddingInput, request_id: str | None = None) -> tuple[list[list[float]], int]:
        """The texts' unit vectors, in order, and the tokens read (special tokens included). With a request id,
        its cancel stops it between batches (raising _Cancelled with the tokens read so far)."""
        tokenized = [self._model.tokenize(text, add_special=True) for text in inputs.texts]
        self._check_lengths(tokenized, inputs.field)
        vectors: list[list[float]] = []
        read = 0
        batches = list(pack([len(t) for t in tokenized], self.max_text_tokens, BATCH_SEQUENCES))
        for number, batch in enumerate(batches, 1):
            if request_id is not None and self._is_cancelled(request_id):
                raise _Cancelled(read)
            vectors.extend(self._encode([tokenized[index] for index in batch]))
            read += sum(len(tokenized[index]) for index in batch)
            self._progressed()
            if request_id is not None and number < len(batches):
                # What was read so far, for billing a request that ends before its vectors (the server may
                # stop waiting for the cancel's confirmation): one small frame per batch of a long request.
                self._send({"type": "started", "id": request_id, "prompt_tokens": read})
            self._confirm_cancelled()
        return vectors, read

    def _confirm_cancelled(self) -> None:
        """Confirm at once the cancel of every waiting request: none of it was read."""
        cancelled = [frame for frame in self._waiting if self._is_cancelled(str(frame["id"]))]
        for frame in cancelled:
            self._waiting.remove(frame)
            self._send_cancelled(str(frame["id"]), None)

    def _send_cancelled(self, request_id: str, tokens: int | None) -> None:
        """A confirmed cancel; with the tokens read, when the request had begun, for billing."""
        frame: Frame = {"type": "finished", "id": request_id, "finish_reason": "cancelled"}
        if tokens is not None:
            frame["prompt_tokens"] = tokens
        self._send(frame)

    def _check_lengths(self, tokenized: list[list[int]], field: str) -> None:
        for index, tokens in enumerate(tokenized):
            if len(tokens) > self.max_text_tokens:
                where = f"{field}[{index}]"
                raise TextTooLong(
                    f"'{where}' is {len(tokens)} tokens long, more than the {self.max_text_tokens} tokens this "
                    "model reads per text; shorten or split it (texts are not truncated)",
                    where,
                )

    def _encode(self, texts: list[list[int]]) -> list[list[float]]:
        self._model.clear()
        entries = [
            (token, position, sequence, True)
            for sequence, tokens in enumerate(texts)
            for position, token in enumerate(tokens)
        ]
        if self._model.decode(entries) != 0:
            raise LlamaError("llama.cpp found no room for an embeddings batch")
        return [normalised(self._model.sequence_embedding(sequence)) for sequence in range(len(texts))]

    def _fail(self, request_id: str, kind: str, message: str, param: str | None) -> None:
        self._send({"type": "failed", "id": request_id, "kind": kind, "message": message, "param": param})
