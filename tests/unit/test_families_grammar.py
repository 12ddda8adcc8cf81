from typing import Any

import pytest

from cirrus.families import FamilyInputError
from cirrus.families.json_schema_grammar import json_object_grammar, json_schema_grammar, tool_call_grammar


def test_json_mode_asks_for_an_object_with_bounded_whitespace() -> None:
    grammar = json_object_grammar()
    assert "root   ::= object" in grammar
    assert r'ws     ::= | " " | "\n" " "{0,16}' in grammar  # no tabs, no endless runs


def test_a_schema_grammar_allows_one_space_and_no_control_characters_in_strings() -> None:
    grammar = json_schema_grammar({"type": "object", "properties": {"note": {"type": "string"}}})
    assert 'space ::= " "?' in grammar.splitlines()
    assert r'char ::= [^"\\\x7F\x00-\x1F] |' in grammar


def test_a_typical_schema_becomes_rules_for_its_properties() -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "tags": {"type": "array"}},
        "required": ["name", "age"],
    }
    grammar = json_schema_grammar(schema)
    assert "root ::=" in grammar and '"\\"name\\""' in grammar and "age-kv" in grammar


def test_a_tool_call_grammar_pins_each_name() -> None:
    tools = [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "now"}},
    ]
    grammar = tool_call_grammar(tools)
    assert '"\\"get_weather\\""' in grammar and '"\\"now\\""' in grammar


@pytest.mark.parametrize(
    "schema",
    [{"type": "frobnicate"}, {"$ref": "#/definitions/missing"}, ["not", "a", "schema"], "string"],
)
def test_an_invalid_schema_is_a_clear_error(schema: Any) -> None:
    with pytest.raises(FamilyInputError, match=r"response_format\.json_schema\.schema") as caught:
        json_schema_grammar(schema)
    assert caught.value.param == "response_format.json_schema.schema"


def test_no_tools_is_a_clear_error() -> None:
    with pytest.raises(FamilyInputError, match="at least one function"):
        tool_call_grammar([{"type": "function"}])


@pytest.mark.parametrize(
    "schema, complaint",
    [
        ({"type": "string", "maxLength": 100_000_000}, "maxLength may be at most 1000"),
        ({"type": "array", "items": {"type": "string"}, "minItems": 5000}, "minItems may be at most 1000"),
        ({"type": "object", "properties": {"a": {"type": "string", "maxLength": 1001}}}, "maxLength"),
    ],
)
def test_schemas_that_would_expand_into_huge_grammars_are_refused(
    schema: dict[str, object], complaint: str
) -> None:
    with pytest.raises(FamilyInputError, match=complaint):
        json_schema_grammar(schema)


def test_a_schema_nested_deeper_than_the_limit_is_refused() -> None:
    schema: dict[str, object] = {"type": "string"}
    for _ in range(40):
        schema = {"type": "array", "items": schema}
    with pytest.raises(FamilyInputError, match="nested more than"):
        json_schema_grammar(schema)
