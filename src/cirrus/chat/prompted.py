"""Tool calls for models with no native tool-call format (SmolLM2, Gemma): the tools are described in a system
prompt, the output is constrained by a grammar, and the answer is parsed back into a call.

A call is one JSON object, `{"name": ..., "arguments": {...}}`, written as the whole answer: one call per turn.
- tool_choice "required" or a named function: the grammar allows only a call (to that function).
- tool_choice "auto": the grammar allows a call, or plain text that does not begin with "{" or whitespace; an
  answer that begins with "{" is therefore the call.
Earlier turns are rewritten the same way, so the templates of these models (which know no tool roles; Gemma's
insists that user and model turns alternate) can render them: an assistant's calls become its text, as the JSON
it would have written, and a tool's result becomes a user turn; consecutive user turns are joined into one.
"""

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from cirrus.families.json_schema_grammar import tool_call_grammar
from cirrus.families.toolcalls import (
    ToolCall,
    ToolCallDelta,
    ToolCallUpdate,
    arguments_json,
    new_call_id,
    tool_specs,
)

_ROOT = re.compile(r"^root ::=", re.MULTILINE)
PLAIN_TEXT = "root ::= tool-call | plain-text\nplain-text ::= [^{ \\t\\n\\r] [^\\x00]*\n"


def tools_prompt(tools: Sequence[Mapping[str, Any]]) -> str:
    lines = [
        "You can call these tools. To call one, answer with only a JSON object "
        '{"name": <the tool\'s name>, "arguments": <an object of its parameters>}.',
        "",
    ]
    for tool in tools:
        function = tool["function"]
        lines.append(f"- {function['name']}: {function.get('description') or 'no description'}")
        lines.append(f"  parameters: {json.dumps(function.get('parameters') or {}, ensure_ascii=False)}")
    return "\n".join(lines)


def call_grammar(tools: Sequence[Mapping[str, Any]], required: bool) -> str:
    forced = tool_call_grammar(tools)
    if required:
        return forced
    return PLAIN_TEXT + _ROOT.sub("tool-call ::=", forced, count=1)


def prompted_messages(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    rewritten: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for message in messages:
        turn = _turn(message, names)
        if turn["role"] == "user" and rewritten and rewritten[-1]["role"] == "user":
            rewritten[-1] = {**rewritten[-1], "content": f"{rewritten[-1]['content']}\n\n{turn['content']}"}
        else:
            rewritten.append(turn)
    return _with_tools(rewritten, tools) if tools else rewritten


def _turn(message: Mapping[str, Any], names: dict[str, str]) -> dict[str, Any]:
    content = message.get("content") or ""
    if message.get("tool_calls"):
        calls = []
        for call in message["tool_calls"]:
            function = call["function"]
            names[call["id"]] = function["name"]
            arguments = function.get("arguments") or "{}"
            decoded = json.loads(arguments) if isinstance(arguments, str) else arguments
            calls.append(json.dumps({"name": function["name"], "arguments": decoded}, ensure_ascii=False))
        return {"role": "assistant", "content": "\n".join(filter(None, [content, *calls]))}
    if message.get("role") == "tool":
        call_id = str(message.get("tool_call_id"))
        name = names.get(call_id, "the tool")
        return {"role": "user", "content": f"Result of {name} (call {call_id}): {content}"}
    return {"role": message["role"], "content": content}


def _with_tools(messages: list[dict[str, Any]], tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    block = tools_prompt(tools)
    if messages and messages[0]["role"] == "system":
        return [{"role": "system", "content": f"{messages[0]['content']}\n\n{block}"}, *messages[1:]]
    return [{"role": "system", "content": block}, *messages]


class PromptedToolParser:
    """The answer is a call when its first character is "{": held until the end, then parsed whole. Any other
    answer is content as it streams. A call that does not parse (cut off by max_tokens) is given back as content
    and `malformed` is set."""

    def __init__(self, tools: Sequence[Mapping[str, Any]]) -> None:
        self._specs = tool_specs(tools)
        self._held = ""
        self._decided: bool | None = None  # True: a call; False: text; None: nothing but whitespace yet
        self.malformed = False

    def feed(self, text: str) -> ToolCallUpdate:
        if self._decided is False:
            return ToolCallUpdate(content=text)
        self._held += text
        stripped = self._held.lstrip()
        if self._decided is None and stripped:
            self._decided = stripped.startswith("{")
            if not self._decided:
                held, self._held = self._held, ""
                return ToolCallUpdate(content=held)
        return ToolCallUpdate()

    def finish(self) -> ToolCallUpdate:
        held, self._held = self._held, ""
        if not self._decided:
            return ToolCallUpdate(content=held)
        call = self._call(held)
        if call is None:
            self.malformed = True
            return ToolCallUpdate(content=held)
        return ToolCallUpdate(tool_calls=(ToolCallDelta(0, call),))

    def _call(self, text: str) -> ToolCall | None:
        try:
            value = json.loads(text)
        except ValueError:
            return None
        if not isinstance(value, dict) or not isinstance(value.get("arguments"), dict):
            return None
        name = value.get("name")
        if not isinstance(name, str) or name not in self._specs:
            return None
        return ToolCall(new_call_id(), name, arguments_json(value["arguments"]))
