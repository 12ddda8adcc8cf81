"""GBNF grammars that make llama.cpp's sampler write JSON: any object (JSON mode), an object matching a JSON
schema, or a tool call `{"name": ..., "arguments": {...}}` for models without a native tool-call format.

Wraps llama-cpp-python's own converter (`llama_cpp.llama_grammar.json_schema_to_gbnf`).
"""

import json
from collections.abc import Mapping, Sequence
from typing import Any

from cirrus.families.errors import FamilyInputError
from cirrus.families.toolcalls import tool_specs


def json_object_grammar() -> str:
    """`response_format: {"type": "json_object"}`: any JSON value, as llama.cpp's json.gbnf allows."""
    from llama_cpp.llama_grammar import JSON_GBNF  # imported on use: it loads the engine's library

    return str(JSON_GBNF)


# Repetition bounds expand into the grammar one copy at a time, and llama.cpp parses grammars recursively:
# a schema may not make either unbounded.
MAX_REPEAT = 1000
MAX_DEPTH = 32
MAX_GRAMMAR_CHARS = 64 * 1024
BOUNDED_KEYWORDS = ("maxLength", "minLength", "maxItems", "minItems", "maxProperties", "minProperties")


def json_schema_grammar(schema: Any, param: str = "response_format.json_schema.schema") -> str:
    if not isinstance(schema, Mapping):
        raise FamilyInputError(f"{param} must be a JSON schema object", param)
    _check_bounds(schema, param, 0)
    grammar = _converted(schema, param)
    if len(grammar) > MAX_GRAMMAR_CHARS:
        raise FamilyInputError(
            f"{param} makes a grammar of {len(grammar)} characters, more than the {MAX_GRAMMAR_CHARS} allowed",
            param,
        )
    return grammar


def _check_bounds(node: Any, param: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise FamilyInputError(f"{param} is nested more than {MAX_DEPTH} levels deep", param)
    if isinstance(node, Mapping):
        for keyword in BOUNDED_KEYWORDS:
            value = node.get(keyword)
            if isinstance(value, int) and value > MAX_REPEAT:
                raise FamilyInputError(f"{param}: {keyword} may be at most {MAX_REPEAT}, not {value}", param)
        children: Any = node.values()
    elif isinstance(node, list):
        children = node
    else:
        return
    for child in children:
        _check_bounds(child, param, depth + 1)


def _converted(schema: Mapping[str, Any], param: str) -> str:
    from llama_cpp.llama_grammar import json_schema_to_gbnf  # imported on use: it loads the engine's library

    try:
        return str(json_schema_to_gbnf(json.dumps(schema)))
    except Exception as exc:  # the converter raises bare ValueErrors, KeyErrors and more on bad schemas
        raise FamilyInputError(
            f"{param} is not a JSON schema this server can follow: {exc!r}", param
        ) from exc


def tool_call_grammar(tools: Sequence[Mapping[str, Any]]) -> str:
    """One call to one of `tools`, its arguments valid against that tool's parameter schema."""
    specs = tool_specs(tools)
    if not specs:
        raise FamilyInputError("tools must list at least one function with a name", "tools")
    choices = [
        {
            "type": "object",
            "properties": {
                "name": {"const": spec.name},
                "arguments": dict(spec.parameters) or {"type": "object"},
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for spec in specs.values()
    ]
    schema = choices[0] if len(choices) == 1 else {"anyOf": choices}
    return json_schema_grammar(schema, "tools")
