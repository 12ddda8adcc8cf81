"""A chat request's tools, tool_choice, response_format and thinking switch, validated into one shape.

Tools arrive as OpenAI's `{"type": "function", "function": {...}}` or Workers AI's bare `{"name", "description",
"parameters"}`; both become the OpenAI shape, which the family templates expect.
"""

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from cirrus.errors import InvalidInput
from cirrus.families import FamilyInputError
from cirrus.families.json_schema_grammar import json_schema_grammar

ToolChoice = Literal["none", "auto", "required"] | str  # a str other than the three is a function's name
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
JsonKind = Literal["json_object", "json_schema"]


@dataclass(frozen=True)
class JsonFormat:
    kind: JsonKind
    schema: Mapping[str, Any] | None = None  # json_schema's schema; None for json_object


@dataclass(frozen=True)
class ChatOptions:
    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: ToolChoice = "auto"
    json_format: JsonFormat | None = None
    enable_thinking: bool | None = None
    stream: bool = False

    @property
    def calls_tools(self) -> bool:
        return bool(self.tools) and self.tool_choice != "none"

    def offered_tools(self) -> tuple[dict[str, Any], ...]:
        """The tools the model may call: all of them, or the one tool_choice names."""
        if self.tool_choice in ("none", "auto", "required"):
            return self.tools if self.calls_tools else ()
        return tuple(t for t in self.tools if t["function"]["name"] == self.tool_choice)


def chat_options(
    tools: Any, tool_choice: Any, response_format: Any, enable_thinking: Any, stream: bool
) -> ChatOptions:
    normalised = normalise_tools(tools)
    return ChatOptions(
        normalised,
        _tool_choice(tool_choice, normalised),
        json_format(response_format),
        _thinking(enable_thinking),
        stream,
    )


def normalise_tools(tools: Any) -> tuple[dict[str, Any], ...]:
    if tools is None:
        return ()
    if not isinstance(tools, Sequence) or isinstance(tools, str):
        raise InvalidInput("'tools' must be a list of functions", param="tools")
    normalised = tuple(_tool(tool, f"tools[{i}]") for i, tool in enumerate(tools))
    names = [t["function"]["name"] for t in normalised]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate:
        raise InvalidInput(f"'tools' names the function {duplicate!r} more than once", param="tools")
    return normalised


def _tool(tool: Any, where: str) -> dict[str, Any]:
    if not isinstance(tool, Mapping):
        raise InvalidInput(f"'{where}' must be an object", param=where)
    if tool.get("type", "function") != "function":
        raise InvalidInput(f"'{where}.type' must be \"function\"", param=f"{where}.type")
    function = tool.get("function", tool)
    where = f"{where}.function" if "function" in tool else where
    if not isinstance(function, Mapping):
        raise InvalidInput(f"'{where}' must be an object", param=where)
    name = function.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidInput(
            f"'{where}.name' must be 1 to 64 letters, digits, '_', '-' or '.'", param=f"{where}.name"
        )
    description = function.get("description", "")
    if not isinstance(description, str):
        raise InvalidInput(f"'{where}.description' must be a string", param=f"{where}.description")
    parameters = _parameters(function.get("parameters"), f"{where}.parameters")
    clean = {"name": name, "description": description, "parameters": parameters}
    return {"type": "function", "function": clean}


def _parameters(schema: Any, where: str) -> dict[str, Any]:
    """A JSON schema for an object; refused when it is not one the grammar converter can follow."""
    if schema is None:
        return {"type": "object", "properties": {}}
    if not isinstance(schema, Mapping):
        raise InvalidInput(f"'{where}' must be a JSON schema object", param=where)
    if schema.get("type", "object") != "object":
        raise InvalidInput(f"'{where}' must describe an object (type \"object\")", param=where)
    checked(schema, where)
    return dict(schema)


def checked(schema: Any, where: str) -> str:
    """The schema's grammar; a 400 naming `where` when the schema is not valid."""
    try:
        return json_schema_grammar(schema, where)
    except FamilyInputError as exc:
        raise InvalidInput(str(exc), param=where) from None


def _tool_choice(choice: Any, tools: tuple[dict[str, Any], ...]) -> ToolChoice:
    if choice is None:
        return "auto"
    name = _named(choice)
    if name is None:
        raise InvalidInput(
            '\'tool_choice\' must be "none", "auto", "required" or '
            '{"type": "function", "function": {"name": ...}}',
            param="tool_choice",
        )
    if name in ("none", "auto"):
        return name
    if not tools:
        raise InvalidInput(f"'tool_choice' is {name!r} but no 'tools' were sent", param="tool_choice")
    if name != "required" and name not in {t["function"]["name"] for t in tools}:
        raise InvalidInput(
            f"'tool_choice' names the function {name!r}, which 'tools' does not list", param="tool_choice"
        )
    return name


def _named(choice: Any) -> str | None:
    if isinstance(choice, str):
        return choice if choice in ("none", "auto", "required") else None
    if isinstance(choice, Mapping) and choice.get("type", "function") == "function":
        function = choice.get("function", choice)
        name = function.get("name") if isinstance(function, Mapping) else None
        return name if isinstance(name, str) and name not in ("none", "auto", "required") else None
    return None


def json_format(response_format: Any) -> JsonFormat | None:
    """OpenAI's `{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}`, or Workers AI's, whose
    `json_schema` is the schema itself; `{"type": "json_object"}`; `{"type": "text"}` or none: plain text."""
    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, Mapping) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return JsonFormat("json_object")
    if kind != "json_schema":
        raise InvalidInput(
            '\'response_format.type\' must be "text", "json_object" or "json_schema"',
            param="response_format.type",
        )
    wrapper = response_format.get("json_schema")
    if not isinstance(wrapper, Mapping):
        raise InvalidInput(
            "'response_format.json_schema' must be an object", param="response_format.json_schema"
        )
    openai_shape = "schema" in wrapper or "name" in wrapper  # neither is a JSON schema keyword
    schema = wrapper.get("schema", {"type": "object"}) if openai_shape else wrapper
    where = "response_format.json_schema.schema" if openai_shape else "response_format.json_schema"
    checked(schema, where)
    return JsonFormat("json_schema", dict(schema))


def _thinking(value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise InvalidInput(
        "'chat_template_kwargs.enable_thinking' must be true or false",
        param="chat_template_kwargs.enable_thinking",
    )
