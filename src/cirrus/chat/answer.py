"""A chat answer's text, as the route receives it (live or replayed from the response cache: the same events),
parsed into reasoning, content and tool calls for either protocol.

Reasoning tokens are not counted by the engine: they are estimated as the completion tokens' share of the
characters that went to reasoning (exact when every token has the same length, close for one answer).
"""

import json
from dataclasses import dataclass
from typing import Any

from cirrus.chat.plan import ChatPlan
from cirrus.errors import JsonModeFailed
from cirrus.families import ChatDelta, ToolCall
from cirrus.runtime.params import Usage


@dataclass(frozen=True)
class ChatResult:
    reasoning: str
    content: str
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str
    reasoning_tokens: int
    usage: Usage
    json_value: Any = None  # JSON mode: the parsed answer
    stop_sequence: str | None = None  # the stop string that ended the answer, if one did


class ChatStream:
    """Feed the answer's text as it arrives; each call returns what can be shown now."""

    def __init__(self, plan: ChatPlan) -> None:
        self._plan = plan
        self._parser = plan.parser()
        self._chars = 0
        self._reasoning_chars = 0
        self._calls = 0

    def feed(self, text: str) -> ChatDelta:
        self._chars += len(text)
        return self._counted(self._parser.feed(text))

    def finish(self) -> ChatDelta:
        return self._counted(self._parser.finish())

    def finish_reason(self, engine_reason: str) -> str:
        if self._calls:
            return "tool_calls"
        return engine_reason if engine_reason in ("stop", "length") else "stop"

    def reasoning_tokens(self, usage: Usage) -> int:
        """The worker's count of tokens between the thinking markers; for a model whose markers are not single
        tokens, an estimate from the share of characters that were reasoning."""
        if usage.reasoning_tokens or not self._reasoning_chars or not self._chars:
            return usage.reasoning_tokens if self._reasoning_chars else 0
        completion = usage.completion_tokens
        return min(completion, round(completion * self._reasoning_chars / self._chars))

    def _counted(self, delta: ChatDelta) -> ChatDelta:
        self._reasoning_chars += len(delta.reasoning)
        self._calls += len(delta.tool_calls)
        return delta


def parse_whole(plan: ChatPlan, text: str, engine_reason: str, usage: Usage) -> ChatResult:
    """The whole answer; JSON mode's answer must be complete, valid JSON, else `JsonModeFailed`."""
    stream = ChatStream(plan)
    delta = stream.feed(text) + stream.finish()
    reason = stream.finish_reason(engine_reason)
    value = json_answer(delta.content, engine_reason) if plan.json_mode else None
    calls = tuple(d.call for d in delta.tool_calls)
    reasoning_tokens = stream.reasoning_tokens(usage)
    return ChatResult(delta.reasoning, delta.content, calls, reason, reasoning_tokens, usage, value)


def json_answer(content: str, engine_reason: str) -> Any:
    """A length limit usually cuts the JSON open; a closed object or array that fit is still an answer."""
    try:
        value = json.loads(content)
    except ValueError:
        raise JsonModeFailed() from None
    if engine_reason == "length" and not isinstance(value, dict | list):
        raise JsonModeFailed()  # a number or string may have been cut short and still parse
    return value
