"""What every family's tool-call parser shares: the tools offered, parsed calls, OpenAI-style deltas.

A parser is fed the answer text (reasoning already split off) piece by piece and returns `ToolCallUpdate`s: the
text that stays content, and tool-call deltas. A call is emitted whole, as one delta, once its closing marker
has arrived: id, name and the complete arguments JSON. Text that looked like a tool call but is not a valid one
(unterminated at the end, arguments that are not a JSON object, a tool name the request did not offer) is
given back as content, unchanged, and the parser's `malformed` flag is set; no exception escapes a parser.
"""

import json
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class ToolSpec:
    name: str
    parameters: Mapping[str, Any] = field(default_factory=dict)

    def property_schema(self, key: str) -> Mapping[str, Any]:
        properties = self.parameters.get("properties")
        if isinstance(properties, Mapping):
            schema = properties.get(key)
            if isinstance(schema, Mapping):
                return schema
        return {}


def tool_specs(tools: Iterable[Mapping[str, Any]] | None) -> dict[str, ToolSpec]:
    """The offered tools by name, from OpenAI's `{"type": "function", "function": {...}}` or a bare function."""
    specs: dict[str, ToolSpec] = {}
    for tool in tools or ():
        function = tool.get("function", tool)
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            parameters = function.get("parameters")
            specs[function["name"]] = ToolSpec(
                function["name"], parameters if isinstance(parameters, Mapping) else {}
            )
    return specs


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # a JSON object, as text

    def to_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class ToolCallDelta:
    """One entry of an OpenAI stream chunk's `delta.tool_calls`."""

    index: int
    call: ToolCall

    def to_openai(self) -> dict[str, Any]:
        return {"index": self.index, **self.call.to_openai()}


@dataclass(frozen=True)
class ToolCallUpdate:
    content: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = ()

    def __add__(self, other: "ToolCallUpdate") -> "ToolCallUpdate":
        return ToolCallUpdate(self.content + other.content, self.tool_calls + other.tool_calls)


class ToolCallParser(Protocol):
    @property
    def malformed(self) -> bool: ...

    def feed(self, text: str) -> ToolCallUpdate: ...

    def finish(self) -> ToolCallUpdate: ...


@dataclass(frozen=True)
class ParsedToolCalls:
    content: str
    tool_calls: tuple[ToolCall, ...]
    malformed: bool


def parse_all(parser: ToolCallParser, text: str) -> ParsedToolCalls:
    update = parser.feed(text) + parser.finish()
    return ParsedToolCalls(update.content, tuple(d.call for d in update.tool_calls), parser.malformed)


def new_call_id() -> str:
    return f"call_{secrets.token_hex(12)}"


def arguments_json(arguments: Mapping[str, Any]) -> str:
    return json.dumps(arguments, ensure_ascii=False)


def known_tool(specs: Mapping[str, ToolSpec], name: str) -> bool:
    """With no tools listed every name passes (the caller chose to parse anyway); else it must be offered."""
    return not specs or name in specs
