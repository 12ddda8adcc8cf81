"""Split a model's output into reasoning (inside its thinking markers) and the answer, as it streams.

Rules, the same whether the text comes whole or in pieces:
- Reasoning is the text between the opening and the closing marker; only a block at the very start counts
  (whitespace before it is ignored). A later opening marker is ordinary answer text.
- `starts_in_reasoning`: the prompt already opened the block (GLM-4.7 ends its prompt with `<think>`), so the
  output is reasoning until the closing marker. An opening marker the model repeats at the start is dropped.
- Leading whitespace of the reasoning and of the answer is dropped (GLM writes `\\n<think>` and `</think>\\n`).
- Output that ends inside the block (a length limit) leaves all of it as reasoning.
"""

from dataclasses import dataclass
from enum import Enum

from cirrus.families.markers import held_back


@dataclass(frozen=True)
class ReasoningDelta:
    reasoning: str = ""
    content: str = ""

    def __add__(self, other: "ReasoningDelta") -> "ReasoningDelta":
        return ReasoningDelta(self.reasoning + other.reasoning, self.content + other.content)


class _State(Enum):
    START = "start"  # nothing but whitespace seen yet
    REASONING = "reasoning"
    CONTENT = "content"


class ReasoningSplitter:
    def __init__(self, open_marker: str, close_marker: str, starts_in_reasoning: bool = False) -> None:
        self._open = open_marker
        self._close = close_marker
        self._in_reasoning_at_start = starts_in_reasoning
        self._state = _State.START
        self._buffer = ""
        self._section_started = False  # False while the current section has only had whitespace

    def feed(self, text: str) -> ReasoningDelta:
        self._buffer += text
        delta = ReasoningDelta()
        while True:
            step = self._step()
            if step is None:
                return delta
            delta = delta + step

    def finish(self) -> ReasoningDelta:
        rest, self._buffer = self._buffer, ""
        if self._state is _State.START:
            self._state = _State.REASONING if self._in_reasoning_at_start else _State.CONTENT
        return self._emit(rest)

    def _step(self) -> ReasoningDelta | None:
        """Consume what the buffer allows; None when it must wait for more text."""
        if self._state is _State.START:
            return self._start()
        if self._state is _State.REASONING:
            return self._reasoning()
        if not self._buffer:
            return None
        text, self._buffer = self._buffer, ""
        return self._emit(text)

    def _start(self) -> ReasoningDelta | None:
        stripped = self._buffer.lstrip()
        if not stripped or (self._open.startswith(stripped) and stripped != self._open):
            return None  # still only whitespace, or possibly the opening marker
        if stripped.startswith(self._open):
            self._buffer = stripped[len(self._open) :]
            self._enter(_State.REASONING)
        else:
            self._enter(_State.REASONING if self._in_reasoning_at_start else _State.CONTENT)
        return ReasoningDelta()

    def _reasoning(self) -> ReasoningDelta | None:
        end = self._buffer.find(self._close)
        if end >= 0:
            text, self._buffer = self._buffer[:end], self._buffer[end + len(self._close) :]
            delta = self._emit(text)
            self._enter(_State.CONTENT)
            return delta
        keep = held_back(self._buffer, self._close)
        text = self._buffer[: len(self._buffer) - keep]
        if not text:
            return None
        self._buffer = self._buffer[len(text) :]
        return self._emit(text)

    def _enter(self, state: _State) -> None:
        self._state = state
        self._section_started = False

    def _emit(self, text: str) -> ReasoningDelta:
        if not self._section_started:
            text = text.lstrip()
            self._section_started = bool(text)
        if self._state is _State.REASONING:
            return ReasoningDelta(reasoning=text)
        return ReasoningDelta(content=text)


def split_reasoning(
    text: str, open_marker: str, close_marker: str, starts_in_reasoning: bool = False
) -> ReasoningDelta:
    splitter = ReasoningSplitter(open_marker, close_marker, starts_in_reasoning)
    return splitter.feed(text) + splitter.finish()
