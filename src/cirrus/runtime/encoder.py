"""The embeddings engine inside a worker: one request at a time, its texts packed into batches with one sequence
per text, each text's pooled vector read back and L2-normalised.

A text longer than the model reads is refused, never truncated: a silently shortened text would give a vector
for text the caller did not send. (Workers AI does not document what it does; OpenAI refuses too.)
"""

import logging
from collections import deque
from collections.abc import Callable

from cirrus.runtime.embedding import BATCH_SEQUENCES, EmbeddingInput, normalised, pack
from cirrus.runtime.frames import Frame
from cirrus.runtime.llama import LlamaError, LlamaModel

log = logging.getLogger(__name__)
Send = Callable[[Frame], None]


class TextTooLong(ValueError):
    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


class EmbeddingEngine:
    """Serves `embed` frames with the same calls the worker makes of the batch scheduler."""

    def __init__(
        self, model: LlamaModel, max_text_tokens: int, send: Send, is_cancelled: Callable[[str], bool]
    ) -> None:
        if not model.pooled:
            raise LlamaError("the model has no pooling type, so it gives no embedding per text")
        self._model = model
        self.max_text_tokens = max_text_tokens
        self._send = send
        self._is_cancelled = is_cancelled
        self._waiting: deque[Frame] = deque()

    @property
    def busy(self) -> bool:
        return bool(self._waiting)

    def set_threads(self, threads: int) -> None:
        self._model.set_threads(threads)

    def submit(self, frame: Frame) -> None:
        self._waiting.append(frame)

    def step(self) -> None:
        if not self._waiting:
            return
        frame = self._waiting.popleft()
        request_id = str(frame["id"])
        if self._is_cancelled(request_id):
            self._send({"type": "finished", "id": request_id, "finish_reason": "cancelled"})
            return
        if frame["type"] != "embed":  # the service checks the model's task; this worker could not generate
            self._fail(request_id, "internal", "this worker serves an embeddings model only", None)
            return
        try:
            vectors, tokens = self.embed(EmbeddingInput.from_frame(frame["input"]))
        except TextTooLong as exc:
            self._fail(request_id, "invalid_input", str(exc), exc.param)
        except Exception as exc:  # reported to this request alone; the worker keeps serving
            log.exception("embedding request %s failed", request_id, extra={"request_id": request_id})
            self._fail(request_id, "internal", f"{type(exc).__name__}: {exc}", None)
        else:
            self._send({"type": "embedded", "id": request_id, "vectors": vectors, "prompt_tokens": tokens})

    def embed(self, inputs: EmbeddingInput) -> tuple[list[list[float]], int]:
        """The texts' unit vectors, in order, and the tokens read (special tokens included)."""
        tokenized = [self._model.tokenize(text, add_special=True) for text in inputs.texts]
        self._check_lengths(tokenized, inputs.field)
        vectors: list[list[float]] = []
        for batch in pack([len(t) for t in tokenized], self.max_text_tokens, BATCH_SEQUENCES):
            vectors.extend(self._encode([tokenized[index] for index in batch]))
        return vectors, sum(len(tokens) for tokens in tokenized)

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
