"""GBNF grammars that make llama.cpp's sampler write JSON: any object (JSON mode), an object matching a JSON
schema, or a tool call `{"name": ..., "arguments": {...}}` for models without a native tool-call format.

Wraps llama-cpp-python's own converter (`llama_cpp.llama_grammar.json_schema_to_gbnf`).
"""

import json
from collections.abc import Mapping, Sequence
from typing import Any

from llama_cpp.llama_grammar import JSON_GBNF, json_schema_to_gbnf

from cirrus.families.errors import FamilyInputError
from cirrus.families.toolcalls import tool_specs


def json_object_grammar() -> str:
    """`response_format: {"type": "json_object"}`: any JSON value, as llama.cpp's json.gbnf allows."""
    return JSON_GBNF


def json_schema_grammar(schema: Any, param: str = "response_format.json_schema.schema") -> str:
    if not isinstance(schema, Mapping):
        raise FamilyInputError(f"{param} must be a JSON schema object", param)
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
