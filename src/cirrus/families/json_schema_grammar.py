"""GBNF grammars that make llama.cpp's sampler write JSON: any object (JSON mode), an object matching a JSON
schema, or a tool call `{"name": ..., "arguments": {...}}` for models without a native tool-call format.

Wraps llama-cpp-python's own converter (`llama_cpp.llama_grammar.json_schema_to_gbnf`).
"""

import json
from collections.abc import Mapping, Sequence
from typing import Any

from cirrus.families.errors import FamilyInputError
from cirrus.families.toolcalls import tool_specs

# llama.cpp's json.gbnf, bounded: whitespace is one space or a newline and an indent of at most 16 spaces (no
# tabs, no runs of blank lines), fractions and exponents have at most 16 and 3 digits, escapes include `\/`, and
# objects and arrays nest at most JSON_DEPTH deep (the values of level n open level n + 1): the worker follows the
# answer through this grammar, at a cost that grows with the nesting. Strings and the members of objects and arrays
# stay unbounded: the worker closes them as the token budget runs out (`cirrus.runtime.json_closing`).
JSON_DEPTH = 64
JSON_SCALARS = r"""
scalar ::= string | number | ("true" | "false" | "null") ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= "-"? ([0-9] | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})? ws
ws     ::= | " " | "\n" " "{0,16}
"""


def _json_level(level: int) -> str:
    """The rules of one level: `object`, `value` at the root's (an array cannot be the root), then `object2`,
    `array2`, `value2` and so on."""
    name = "" if level == 1 else str(level)
    deeper = "scalar" if level == JSON_DEPTH else f"object{level + 1} | array{level + 1} | scalar"
    array = f'array{name} ::= "[" ws ( value{name} ("," ws value{name})* )? "]" ws\n' if level > 1 else ""
    return (
        f'object{name} ::= "{{" ws ( string ":" ws value{name} ("," ws string ":" ws value{name})* )? "}}" ws\n'
        f"{array}value{name} ::= {deeper}\n"
    )


JSON_OBJECT_GBNF = "root   ::= object\n" + "".join(map(_json_level, range(1, JSON_DEPTH + 1))) + JSON_SCALARS

# What the schema converter writes, and what replaces it: one optional space (whatever the converter's version
# would allow), and no control characters inside strings (JSON forbids them; the converter's `char` allows them).
SCHEMA_SPACE_RULE = 'space ::= " "?'
CONVERTER_CHAR_CLASS = r'char ::= [^"\\] |'
JSON_CHAR_CLASS = r'char ::= [^"\\\x7F\x00-\x1F] |'


def json_object_grammar() -> str:
    """`response_format: {"type": "json_object"}`: any JSON object."""
    return JSON_OBJECT_GBNF


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
    grammar = _bounded(_converted(schema, param))
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


def _bounded(grammar: str) -> str:
    lines = grammar.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("space ::="):
            lines[index] = SCHEMA_SPACE_RULE
        elif line.startswith(CONVERTER_CHAR_CLASS):
            lines[index] = JSON_CHAR_CLASS + line[len(CONVERTER_CHAR_CLASS) :]
    return "\n".join(lines) + "\n"


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
