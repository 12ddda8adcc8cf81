"""A chat answer's text, streamed or whole, into reasoning, content and tool calls.

The reasoning splitter runs first, so a tool call written inside the reasoning stays reasoning; the answer part
then goes through the family's tool-call parser when the request offered tools.
"""

from dataclasses import dataclass

from cirrus.families.reasoning import ReasoningDelta, ReasoningSplitter
from cirrus.families.toolcalls import ToolCall, ToolCallDelta, ToolCallParser, ToolCallUpdate


@dataclass(frozen=True)
class ChatDelta:
    reasoning: str = ""
    content: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = ()

    def __add__(self, other: "ChatDelta") -> "ChatDelta":
        return ChatDelta(
            self.reasoning + other.reasoning, self.content + other.content, self.tool_calls + other.tool_calls
        )

    @property
    def empty(self) -> bool:
        return not (self.reasoning or self.content or self.tool_calls)


@dataclass(frozen=True)
class ChatOutput:
    reasoning: str
    content: str
    tool_calls: tuple[ToolCall, ...]
    malformed: bool  # some text looked like a tool call but was not a valid one: it is in `content`

    @property
    def finish_reason(self) -> str | None:
        """ "tool_calls" when the answer called tools; otherwise the engine's own reason stands."""
        return "tool_calls" if self.tool_calls else None


class ChatOutputParser:
    def __init__(self, splitter: ReasoningSplitter | None, tool_parser: ToolCallParser | None) -> None:
        self._splitter = splitter
        self._tool_parser = tool_parser

    @property
    def malformed(self) -> bool:
        return self._tool_parser is not None and self._tool_parser.malformed

    def feed(self, text: str) -> ChatDelta:
        split = self._splitter.feed(text) if self._splitter else ReasoningDelta(content=text)
        return self._answer(split, final=False)

    def finish(self) -> ChatDelta:
        split = self._splitter.finish() if self._splitter else ReasoningDelta()
        return self._answer(split, final=True)

    def _answer(self, split: ReasoningDelta, final: bool) -> ChatDelta:
        if self._tool_parser is None:
            return ChatDelta(split.reasoning, split.content)
        update = self._tool_parser.feed(split.content) if split.content else ToolCallUpdate()
        if final:
            update = update + self._tool_parser.finish()
        return ChatDelta(split.reasoning, update.content, update.tool_calls)


def parse_output(parser: ChatOutputParser, text: str) -> ChatOutput:
    delta = parser.feed(text) + parser.finish()
    return ChatOutput(
        delta.reasoning, delta.content, tuple(d.call for d in delta.tool_calls), parser.malformed
    )
