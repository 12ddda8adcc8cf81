"""GBNF rules for one or more tool calls in a family's own markup, rule `nc-calls`.

- GLM: `<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>`, calls one after another,
  an optional newline after the name and around each pair (GLM-4.5/4.6 write them, 4.7 does not). Keys are the
  tool's declared properties (any key when its schema allows undeclared ones). A value is free text up to
  `</arg_value>` where the property may be a string, as the template writes strings; otherwise JSON that its
  schema allows, as the template writes every other value. Which keys are required is not enforced.
- GLM-4 (9B-chat, 0414, Edge): `NAME\n{json}`, the JSON arguments following the tool's parameter schema; further
  calls each after an `<|assistant|>`, as the glm4 parser reads them.
- Kimi: `<|tool_calls_section_begin|>` then calls `<|tool_call_begin|>functions.NAME:IDX
  <|tool_call_argument_begin|>{json}<|tool_call_end|>`, then `<|tool_calls_section_end|>`; the JSON arguments
  follow the tool's parameter schema.

Markers are matched as text: llama.cpp's grammar sampler reads every token as its text, special tokens
included, so a marker matches the model's single special token (and, as the parsers do, the same text spelled
out in ordinary tokens). The JSON rules are the ones JSON mode uses (`json_schema_grammar`), renamed per tool.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from cirrus.families import glm, glm4, kimi
from cirrus.families.coerce import schema_types
from cirrus.families.errors import FamilyInputError
from cirrus.families.gbnf_build import literal, prefixed, text_then
from cirrus.families.json_schema_grammar import json_schema_grammar
from cirrus.families.toolcalls import ToolSpec

# The call's number in `functions.NAME:IDX`, counted over the whole conversation.
KIMI_INDEX = "nc-index ::= [0-9]{1,6}"


def glm_call_rules(specs: Sequence[ToolSpec]) -> list[str]:
    tools = " | ".join(f"nc-tool{index}" for index in range(len(specs)))
    lines = [
        "nc-calls ::= nc-call ( nc-ws nc-call )*",
        f"nc-call ::= {literal(glm.OPEN)} ( {tools} ) {literal(glm.CLOSE)}",
        'nc-nl ::= "\\n"?',
        *text_then("nc-value", glm.VALUE_CLOSE),
        *text_then("nc-key", glm.KEY_CLOSE),
    ]
    for index, spec in enumerate(specs):
        lines += _glm_tool(index, spec)
    return lines


def _glm_tool(index: int, spec: ToolSpec) -> list[str]:
    rule = f"nc-tool{index}"
    pairs, lines = [], []
    for number, (key, schema) in enumerate(_properties(spec.parameters).items()):
        value, value_rules = _glm_value(schema, f"nc-t{index}-a{number}-")
        key_part = f"{literal(key + glm.KEY_CLOSE)} nc-nl {literal(glm.VALUE_OPEN)}"
        pairs.append(f"{key_part} {value}")
        lines += value_rules
    if _allows_other_keys(spec.parameters):
        pairs.append(f"nc-key-0 nc-nl {literal(glm.VALUE_OPEN)} nc-value-0")
    if not pairs:
        return [f"{rule} ::= {literal(spec.name)} nc-nl"]
    return [
        f"{rule} ::= {literal(spec.name)} nc-nl ( {rule}-pair nc-nl )*",
        f"{rule}-pair ::= {literal(glm.KEY_OPEN)} ( {' | '.join(pairs)} )",
        *lines,
    ]


def _glm_value(schema: Mapping[str, Any], prefix: str) -> tuple[str, list[str]]:
    """The rule for one value then `</arg_value>`, and the rules it needs."""
    types = schema_types(schema)
    if not types or "string" in types:
        return "nc-value-0", []
    try:
        grammar = json_schema_grammar(schema, "tools")
    except FamilyInputError:  # e.g. a `$ref` into the tool's own definitions: the text is decoded as it comes
        return "nc-value-0", []
    return f"{prefix}root {literal(glm.VALUE_CLOSE)}", [prefixed(grammar, prefix).strip()]


def _properties(parameters: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    properties = parameters.get("properties")
    if not isinstance(properties, Mapping):
        return {}
    return {key: value if isinstance(value, Mapping) else {} for key, value in properties.items()}


def _allows_other_keys(parameters: Mapping[str, Any]) -> bool:
    """As llama.cpp's schema converter reads it: undeclared keys only where the schema asks for them, or where it
    declares no properties at all and does not forbid them."""
    additional = parameters.get("additionalProperties")
    if additional is True or isinstance(additional, Mapping):
        return True
    return additional is None and "properties" not in parameters


def glm4_call_rules(specs: Sequence[ToolSpec]) -> list[str]:
    tools = " | ".join(f"nc-tool{index}" for index in range(len(specs)))
    lines = [f"nc-calls ::= nc-call ( {literal(glm4.TURN)} nc-call )*", f"nc-call ::= {tools}"]
    for index, spec in enumerate(specs):
        lines += _json_arguments_tool(index, spec, literal(spec.name + "\n"))
    return lines


def kimi_call_rules(specs: Sequence[ToolSpec]) -> list[str]:
    tools = " | ".join(f"nc-tool{index}" for index in range(len(specs)))
    lines = [
        f"nc-calls ::= {literal(kimi.SECTION_BEGIN)} nc-call+ {literal(kimi.SECTION_END)}",
        f"nc-call ::= {literal(kimi.CALL_BEGIN + 'functions.')} ( {tools} ) {literal(kimi.CALL_END)}",
        KIMI_INDEX,
    ]
    for index, spec in enumerate(specs):
        opening = f"{literal(spec.name + ':')} nc-index {literal(kimi.ARGUMENT_BEGIN)}"
        lines += _json_arguments_tool(index, spec, opening)
    return lines


def _json_arguments_tool(index: int, spec: ToolSpec, opening: str) -> list[str]:
    """Rule `nc-tool{index}`: `opening`, then the tool's arguments as JSON its parameter schema allows."""
    arguments = json_schema_grammar(dict(spec.parameters) or {"type": "object"}, "tools")
    return [f"nc-tool{index} ::= {opening} nc-t{index}-root", prefixed(arguments, f"nc-t{index}-").strip()]
