"""A chat answer in Workers AI's shape, whole or streamed: the `/ai/run` route and the embedded SDK
(`Ai.local()`) both write it, so one body answers the same way in-process and over HTTP."""

import json
from typing import Any

from cirrus.api.usage import usage_dict
from cirrus.chat import ChatDelta, ChatEnd, ChatEvent, ChatResult, ToolCall
from cirrus.service import EmbeddingResult


def tool_calls(calls: tuple[ToolCall, ...]) -> list[dict[str, Any]]:
    """Workers AI's shape, `{"name", "arguments"}` with the arguments as an object, plus the call's `id` (which a
    tool result may send back as `tool_call_id`)."""
    return [{"id": c.id, "name": c.name, "arguments": json.loads(c.arguments)} for c in calls]


def result_body(result: ChatResult, json_mode: bool, raw: bool = False) -> dict[str, Any]:
    """`response` is the answer's text, or in JSON mode the JSON value itself, as Workers AI answers it. A raw
    prompt has no chat format, so no reasoning count either."""
    if raw:
        return {"response": result.content, "usage": usage_dict(result.usage)}
    body: dict[str, Any] = {"response": result.json_value if json_mode else result.content}
    if result.reasoning:
        body["reasoning"] = result.reasoning
    if result.tool_calls:
        body["tool_calls"] = tool_calls(result.tool_calls)
    return {**body, "usage": usage_dict(result.usage, result.reasoning_tokens)}


def stream_payloads(event: ChatEvent) -> list[dict[str, Any]]:
    """The streamed events for one chat event: reasoning, text and tool calls apart, then the usage."""
    if isinstance(event, ChatEnd):
        return [{"response": "", "usage": usage_dict(event.usage, event.reasoning_tokens)}]
    return _delta_payloads(event)


def _delta_payloads(delta: ChatDelta) -> list[dict[str, Any]]:
    payloads: list[dict[str, Any]] = []
    if delta.reasoning:
        payloads.append({"response": "", "reasoning": delta.reasoning})
    if delta.content:
        payloads.append({"response": delta.content})
    if delta.tool_calls:
        payloads.append({"response": "", "tool_calls": tool_calls(tuple(d.call for d in delta.tool_calls))})
    return payloads


def embedding_body(result: EmbeddingResult) -> dict[str, Any]:
    dimensions = len(result.vectors[0]) if result.vectors else 0
    return {"shape": [len(result.vectors), dimensions], "data": result.vectors}
