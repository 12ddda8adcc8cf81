"""Bring OpenAI-style chat messages into the shape the family templates (ours and the official ones) expect.

- `content: null` (an assistant turn that only calls tools) becomes "": the official GLM templates would
  print "None".
- Tool-call arguments arrive as a JSON string; GLM's templates iterate them as a mapping, so they are decoded
  (they must be a JSON object). Kimi's template writes a string as it is, so Kimi keeps the caller's text.
- A null `reasoning_content` is dropped (Kimi's official template would print "None").
- Every tool result must name the id of a call made earlier in the conversation.
"""

import json
from collections.abc import Mapping, Sequence
from typing import Any

from cirrus.families.errors import FamilyInputError


def prepare_messages(messages: Sequence[Mapping[str, Any]], decode_arguments: bool) -> list[dict[str, Any]]:
    prepared: list[dict[str, Any]] = []
    call_ids: set[str] = set()
    for index, message in enumerate(messages):
        copy = {key: value for key, value in message.items() if value is not None}
        copy["content"] = message.get("content") or ""
        if message.get("tool_calls"):
            if not isinstance(message["tool_calls"], list):
                raise FamilyInputError(f"messages[{index}].tool_calls must be a list of calls", "messages")
            copy["tool_calls"] = [
                _tool_call(call, decode_arguments, f"messages[{index}].tool_calls[{n}]")
                for n, call in enumerate(message["tool_calls"])
            ]
            call_ids.update(call["id"] for call in copy["tool_calls"])
        if message.get("role") == "tool":
            _check_result(message, call_ids, index)
        prepared.append(copy)
    return prepared


def _tool_call(call: Any, decode_arguments: bool, where: str) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise FamilyInputError(f"{where} needs function.name", "messages")
    if not isinstance(call.get("id"), str) or not call["id"]:
        raise FamilyInputError(f"{where} needs an id", "messages")
    arguments = function.get("arguments") or "{}"
    if decode_arguments and isinstance(arguments, str):
        arguments = _decoded(arguments, where)
    return {**call, "function": {**function, "arguments": arguments}}


def _decoded(arguments: str, where: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise FamilyInputError(f"{where}.function.arguments must be a JSON object", "messages")
    return value


def _check_result(message: Mapping[str, Any], call_ids: set[str], index: int) -> None:
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str) or call_id not in call_ids:
        raise FamilyInputError(
            f"messages[{index}] is a tool result for call id {call_id!r}, which no earlier assistant turn made",
            "messages",
        )
