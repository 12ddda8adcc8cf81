"""JSON mode's closing: the grammar reading (`runtime.gbnf`), the shortest closing (`runtime.json_closing`) and
the steering that writes it in time (`runtime.json_steering`), against a scripted model whose only wish is to
keep writing (`tests.unit.json_scripted`)."""

import json
import random
from typing import Any

import pytest

from cirrus.families.json_schema_grammar import json_object_grammar, json_schema_grammar
from cirrus.runtime.gbnf import GrammarState, GrammarSyntaxError, Partial, decode_utf8, parse_grammar
from cirrus.runtime.json_closing import Closing, closing_for
from cirrus.runtime.json_steering import ClosingTokens
from cirrus.runtime.params import GenerationInput, SamplingParams
from tests.unit.json_scripted import (
    PIECES,
    ScriptedModel,
    random_value,
    ranked,
    run,
    shortest_answer_tokens,
    shuffled,
)

PERSON: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "home": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["city", "zip"],
        },
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def closing_after(grammar: str, text: str | bytes) -> bytes | None:
    closing = closing_for(grammar)
    data = text.encode() if isinstance(text, str) else text
    return closing.of(GrammarState.initial(closing.grammar).feed(data))


# ---- the closing -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, closing",
    [
        ("", b"{}"),
        ("{", b"}"),
        ('{"na', b'":0}'),
        ('{"name"', b":0}"),
        ('{"name": ', b"0}"),
        ('{"name": "Bo', b'"}'),
        ('{"name": "Bo\\', b'""}'),  # an escape needs its character: \"
        ('{"name": "\\u00', b'00"}'),
        ('{"a": [1, 2', b"]}"),
        ('{"a": [1,', b"0]}"),
        ('{"a": 2.', b"0}"),
        ('{"a": -', b"0}"),
        ('{"a": 1e', b"0}"),
        ('{"a": {"b": [{"c": tr', b"ue}]}}"),
        ('{"a": 1,', b'"":0}'),  # a dangling comma cannot be taken back: a key and a value follow it
        ('{"a": 1}', b""),
    ],
)
def test_the_shortest_closing_of_json_mode(text: str, closing: bytes) -> None:
    found = closing_after(json_object_grammar(), text)
    assert found is not None and len(found) == len(closing)
    json.loads((text.encode() + found).decode())


def test_a_character_cut_by_a_token_is_finished_first() -> None:
    text = b'{"name": "T' + "ö".encode()[:1]
    found = closing_after(json_object_grammar(), text)
    assert found is not None and found.endswith(b'"}') and len(found) == 3
    assert isinstance(json.loads((text + found).decode()), dict)


def test_text_outside_the_grammar_has_no_closing() -> None:
    assert closing_after(json_object_grammar(), '{"a": 1 2') is None
    assert closing_after(json_object_grammar(), "[1]") is None


def test_a_schema_closing_writes_the_missing_required_properties_in_order() -> None:
    grammar = json_schema_grammar(PERSON)
    assert closing_after(grammar, "") == b'{"name":"","age":0}'
    assert closing_after(grammar, '{"name": "Bo') == b'","age":0}'
    found = closing_after(grammar, '{"name": "Bo", "age": 4, "home": {"ci')
    assert found is not None
    value = json.loads('{"name": "Bo", "age": 4, "home": {"ci' + found.decode())
    assert value["home"] == {"city": "", "zip": "00000"}  # the pattern's five digits


def test_a_json_text_never_leaves_the_json_mode_grammar() -> None:
    grammar = parse_grammar(json_object_grammar())
    rng = random.Random(7)
    for _ in range(200):
        document = json.dumps({"k": random_value(rng, 3)}, ensure_ascii=rng.random() < 0.5)
        state = GrammarState.initial(grammar)
        for start in range(0, len(document.encode()), 3):  # 3-byte tokens: characters get cut
            state = state.feed(document.encode()[start : start + 3])
            assert not state.dead, document
        assert state.complete and state.only_whitespace_follows()


# ---- the grammar reading -----------------------------------------------------------------------------------


def test_repetitions_expand_as_llama_cpp_expands_them() -> None:
    grammar = parse_grammar('root ::= "a"{2,3} [0-9]+ ("x" | "y")* "z"? # a comment\n')
    assert Closing(grammar).of(GrammarState.initial(grammar)) == b"aa0"
    for text, alive in [("aaa1", True), ("aaaa", False), ("aa12xyxyz", True), ("aa1zz", False)]:
        assert (not GrammarState.initial(grammar).feed(text.encode()).dead) is alive, text


def test_character_classes_negations_and_escapes() -> None:
    grammar = parse_grammar('root ::= [^"\\\\\\x00-\\x1F] [a-c\\-] "\\n" .\n')
    for text, alive in [
        ("xb\n.", True),
        ("x-\n😀", True),
        ('"a\nx', False),
        ("\ta\nx", False),
        ("xd", False),
    ]:
        assert (not GrammarState.initial(grammar).feed(text.encode()).dead) is alive, text


@pytest.mark.parametrize(
    "text", ["root ::= (", "root ::= undefined-rule\n", 'root ::= "a" <[12]>\n', "x ::= y"]
)
def test_a_grammar_this_reading_cannot_follow_is_an_error(text: str) -> None:
    with pytest.raises(GrammarSyntaxError):
        parse_grammar(text)


def test_utf8_decoding_keeps_a_cut_character_for_the_next_token() -> None:
    codes, partial = decode_utf8("aé".encode()[:2], Partial())
    assert codes == [ord("a")] and partial.remain == 1
    codes, partial = decode_utf8("é".encode()[1:], partial)
    assert codes == [ord("é")] and partial.remain == 0
    assert decode_utf8(b"\x80", Partial())[1].remain < 0  # not UTF-8: nothing can follow


# ---- steering, against a scripted model --------------------------------------------------------------------

ENDLESS = {
    "arrays": ranked(b"[[[[", b"[", b"1", b","),
    "nesting": ranked(b'{"a":{"b":{"c":[', b'[{"', b'{"', b"a", b'":', b"{"),
    "a string": ranked(b'{"', b"hello", b" world"),
    "keys": ranked(b'", "', b'": "', b"hello", b'{"'),
    "whitespace": ranked(b"\n  ", b" ", b"\n", b'{"', b"a", b'":'),
    "numbers": ranked(b'{"', b"a", b'":', b"12345", b"-", b"."),
    "emoji": ranked(b'{"', "😀".encode()[:2], "😀".encode()[2:], b'": "'),
}


@pytest.mark.parametrize("budget", [2, 3, 5, 8, 16, 32, 64, 128])
@pytest.mark.parametrize("habit", sorted(ENDLESS))
def test_an_endless_model_still_answers_valid_json_within_its_budget(habit: str, budget: int) -> None:
    model = ScriptedModel(ENDLESS[habit])
    text, reason = run(json_object_grammar(), model, budget)
    assert model.steps <= budget
    assert isinstance(json.loads(text.decode("utf-8", errors="replace")), dict)
    assert reason == "length"


@pytest.mark.parametrize("seed", range(40))
def test_a_random_model_answers_valid_json_at_every_budget(seed: int) -> None:
    for budget in (2, 4, 7, 16, 40):
        text, _ = run(json_object_grammar(), ScriptedModel(shuffled(seed * 100 + budget)), budget)
        assert isinstance(json.loads(text.decode("utf-8", errors="replace")), dict), text


def test_a_model_that_closes_by_itself_is_left_alone() -> None:
    script = [PIECES.index(piece) for piece in (b'{"', b"a", b'": "', b"hello", b'"}')]
    model = ScriptedModel(lambda step: [script[step - 1]])
    text, reason = run(json_object_grammar(), model, 64)
    assert (text, reason) == (b'{"a": "hello"}', "stop")


@pytest.mark.parametrize("slack", [0, 1, 3, 10, 40])
@pytest.mark.parametrize("seed", range(10))
def test_a_schema_answer_keeps_its_required_properties(slack: int, seed: int) -> None:
    grammar = json_schema_grammar(PERSON)
    text, _ = run(grammar, ScriptedModel(shuffled(seed)), shortest_answer_tokens(grammar) + slack)
    value = json.loads(text.decode("utf-8", errors="replace"))
    assert {"name", "age"} <= set(value) and set(value) <= set(PERSON["properties"])


def test_no_valid_answer_fits_a_budget_under_the_shortest_answer() -> None:
    grammar = json_schema_grammar(PERSON)
    text, _ = run(grammar, ScriptedModel(shuffled(1)), shortest_answer_tokens(grammar) - 1)
    with pytest.raises(ValueError):
        json.loads(text)


def test_closing_tokens_spell_the_closing_exactly() -> None:
    model = ScriptedModel(shuffled(0))
    tokens = ClosingTokens(model)
    assert tokens.of(b'"}') == (PIECES.index(b'"}'),)
    assert tokens.of(b"\xbf\xbf" + b"]}") == (
        PIECES.index(b"\xbf"),
        PIECES.index(b"\xbf"),
        PIECES.index(b"]}"),
    )


def test_json_mode_crosses_the_worker_wire() -> None:
    sampling = SamplingParams(grammar=json_object_grammar(), json_mode=True)
    frame = json.loads(json.dumps(GenerationInput(prompt="hi", sampling=sampling).to_frame()))
    assert GenerationInput.from_frame(frame).sampling.json_mode is True
    del frame["sampling"]["json_mode"]  # a frame from a server that does not know the field
    assert GenerationInput.from_frame(frame).sampling.json_mode is False
