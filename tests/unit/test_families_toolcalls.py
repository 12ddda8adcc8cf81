import itertools
import json
from typing import Any

import pytest

from cirrus.families import family, parse_output
from cirrus.families.coerce import decode_argument
from cirrus.families.glm import GlmToolCallParser
from cirrus.families.kimi import KimiToolCallParser
from cirrus.families.toolcalls import ParsedToolCalls, ToolCallParser, ToolCallUpdate, parse_all

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "metric": {"type": "boolean"},
                    "zip": {"type": "string"},
                    "hours": {"type": "array"},
                },
            },
        },
    },
    {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}},
]


def glm() -> GlmToolCallParser:
    return GlmToolCallParser(TOOLS)


def kimi() -> KimiToolCallParser:
    return KimiToolCallParser(TOOLS)


def args(parsed: ParsedToolCalls, n: int = 0) -> Any:
    return json.loads(parsed.tool_calls[n].arguments)


def streamed(parser: ToolCallParser, text: str, cuts: list[int]) -> ParsedToolCalls:
    bounds = [0, *cuts, len(text)]
    update = ToolCallUpdate()
    for start, end in itertools.pairwise(bounds):
        update = update + parser.feed(text[start:end])
    update = update + parser.finish()
    return ParsedToolCalls(update.content, tuple(d.call for d in update.tool_calls), parser.malformed)


def same_but_ids(a: ParsedToolCalls, b: ParsedToolCalls) -> bool:
    def shape(p: ParsedToolCalls) -> Any:
        return p.content, [(c.name, c.arguments) for c in p.tool_calls], p.malformed

    return bool(shape(a) == shape(b))


GLM45_TEXT = (
    "Checking both.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n"
    "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>\n<tool_call>now\n</tool_call>"
)
GLM47_TEXT = "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Bergen</arg_value></tool_call>"
KIMI_TEXT = (
    "Checking.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    '<|tool_call_argument_begin|>{"city": "Oslo"}<|tool_call_end|>'
    "<|tool_call_begin|>functions.now:1<|tool_call_argument_begin|>{}<|tool_call_end|>"
    "<|tool_calls_section_end|>"
)


class TestGlm:
    def test_glm45_calls_with_newlines(self) -> None:
        parsed = parse_all(glm(), GLM45_TEXT)
        assert parsed.content == "Checking both."
        assert [c.name for c in parsed.tool_calls] == ["get_weather", "now"]
        assert args(parsed) == {"city": "Oslo", "days": 3}
        assert args(parsed, 1) == {}
        assert all(c.id.startswith("call_") and len(c.id) > 10 for c in parsed.tool_calls)
        assert parsed.tool_calls[0].id != parsed.tool_calls[1].id
        assert not parsed.malformed

    def test_glm47_calls_without_newlines(self) -> None:
        parsed = parse_all(glm(), GLM47_TEXT)
        assert parsed.content == ""
        assert args(parsed) == {"city": "Bergen"}

    def test_values_follow_the_schema(self) -> None:
        text = (
            "<tool_call>get_weather<arg_key>zip</arg_key><arg_value>0150</arg_value>"
            "<arg_key>days</arg_key><arg_value>2.0</arg_value><arg_key>metric</arg_key><arg_value>True</arg_value>"
            '<arg_key>hours</arg_key><arg_value>[9, 12]</arg_value><arg_key>note</arg_key><arg_value>{"a": 1}'
            "</arg_value><arg_key>city</arg_key><arg_value>\n  Oslo \n</arg_value></tool_call>"
        )
        assert args(parse_all(glm(), text)) == {
            "zip": "0150", "days": 2, "metric": True, "hours": [9, 12], "note": {"a": 1}, "city": "Oslo"
        }  # fmt: skip

    @pytest.mark.parametrize(
        "text",
        [
            "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value>",  # unterminated
            "<tool_call>send_email<arg_key>to</arg_key><arg_value>x</arg_value></tool_call>",  # not offered
            "<tool_call>get_weather junk <arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>",
            "<tool_call></tool_call>",
        ],
    )
    def test_malformed_calls_come_back_as_content(self, text: str) -> None:
        parsed = parse_all(glm(), text)
        assert parsed == ParsedToolCalls(text, (), True)

    def test_a_bad_call_does_not_stop_a_good_one(self) -> None:
        parsed = parse_all(glm(), "<tool_call>nope</tool_call>" + GLM47_TEXT)
        assert (
            parsed.content == "<tool_call>nope</tool_call>"
            and len(parsed.tool_calls) == 1
            and parsed.malformed
        )

    def test_plain_text_with_angle_brackets_is_content(self) -> None:
        assert parse_all(glm(), "a <tool b <tool_cal") == ParsedToolCalls("a <tool b <tool_cal", (), False)

    @pytest.mark.parametrize("text", [GLM45_TEXT, GLM47_TEXT, "x <tool_call>now</tool_call> y\n"])
    def test_every_split_matches_the_whole_text(self, text: str) -> None:
        whole = parse_all(glm(), text)
        for first in range(len(text) + 1):
            for second in range(first, len(text) + 1, 7):
                assert same_but_ids(streamed(glm(), text, [first, second]), whole), (first, second)


class TestKimi:
    def test_section_with_two_calls_keeps_the_kimi_ids(self) -> None:
        parsed = parse_all(kimi(), KIMI_TEXT)
        assert parsed.content == "Checking."
        assert [(c.id, c.name) for c in parsed.tool_calls] == [
            ("functions.get_weather:0", "get_weather"),
            ("functions.now:1", "now"),
        ]
        assert args(parsed) == {"city": "Oslo"}
        assert not parsed.malformed

    def test_text_after_the_section_is_content(self) -> None:
        text = KIMI_TEXT + "\nDone."
        assert parse_all(kimi(), text).content == "Checking.Done."

    @pytest.mark.parametrize(
        ("call", "why"),
        [
            ('functions.get_weather:0<|tool_call_argument_begin|>{"city": "Os', "bad JSON"),
            ("functions.get_weather:0<|tool_call_argument_begin|>[1]", "not an object"),
            ("functions.send_email:0<|tool_call_argument_begin|>{}", "not offered"),
            ("get_weather<|tool_call_argument_begin|>{}", "no index"),
            ("functions.get_weather:0 {}", "no argument marker"),
        ],
    )
    def test_a_malformed_call_is_given_back(self, call: str, why: str) -> None:
        raw = f"<|tool_call_begin|>{call}<|tool_call_end|>"
        parsed = parse_all(kimi(), f"<|tool_calls_section_begin|>{raw}<|tool_calls_section_end|>")
        assert parsed == ParsedToolCalls(raw, (), True), why

    def test_an_unterminated_section_is_given_back_whole(self) -> None:
        text = "<|tool_calls_section_begin|><|tool_call_begin|>functions.now:0<|tool_call_argument_begin|>{"
        assert parse_all(kimi(), text) == ParsedToolCalls(text, (), True)

    @pytest.mark.parametrize("text", [KIMI_TEXT, KIMI_TEXT + " after"])
    def test_every_split_matches_the_whole_text(self, text: str) -> None:
        whole = parse_all(kimi(), text)
        for first in range(len(text) + 1):
            for second in range(first, len(text) + 1, 11):
                assert streamed(kimi(), text, [first, second]) == whole, (first, second)


class TestWholeAnswers:
    def test_glm47_reasoning_then_a_tool_call(self) -> None:
        parser = family("glm47").output_parser(TOOLS)
        output = parse_output(parser, "The user wants Oslo.</think>" + GLM47_TEXT)
        assert output.reasoning == "The user wants Oslo."
        assert output.content == ""
        assert output.finish_reason == "tool_calls" and output.tool_calls[0].name == "get_weather"

    def test_glm47_with_thinking_off_has_no_reasoning(self) -> None:
        parser = family("glm47").output_parser(None, enable_thinking=False)
        output = parse_output(parser, "Four.")
        assert (output.reasoning, output.content, output.finish_reason) == ("", "Four.", None)

    def test_a_tool_call_inside_the_reasoning_stays_reasoning(self) -> None:
        parser = family("glm45").output_parser(TOOLS)
        output = parse_output(parser, "<think>maybe <tool_call>now</tool_call></think>\nNo need.")
        assert output.reasoning == "maybe <tool_call>now</tool_call>" and output.content == "No need."
        assert output.tool_calls == ()

    def test_kimi_thinking_then_a_section_streamed_token_by_token(self) -> None:
        parser = family("kimi_k2").output_parser(TOOLS)
        text = "<think>Need weather.</think>" + KIMI_TEXT
        deltas = [parser.feed(text[i : i + 5]) for i in range(0, len(text), 5)] + [parser.finish()]
        assert "".join(d.reasoning for d in deltas) == "Need weather."
        assert "".join(d.content for d in deltas) == "Checking."
        calls = [c for d in deltas for c in d.tool_calls]
        assert [c.index for c in calls] == [0, 1]
        assert calls[0].to_openai() == {
            "index": 0,
            "id": "functions.get_weather:0",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
        }

    def test_without_tools_the_markers_stay_text(self) -> None:
        output = parse_output(family("glm45").output_parser(None), GLM47_TEXT)
        assert output.content == GLM47_TEXT and output.tool_calls == ()


@pytest.mark.parametrize(
    ("text", "schema", "value"),
    [
        ("42", {"type": "integer"}, 42),
        ("42", {"type": "string"}, "42"),
        ("4.5", {"type": ["integer", "number"]}, 4.5),
        ("yes", {"type": "boolean"}, "yes"),
        ("false", {"type": "boolean"}, False),
        ("null", {}, None),
        ("not json", {"type": "object"}, "not json"),
    ],
)
def test_argument_decoding(text: str, schema: dict[str, Any], value: Any) -> None:
    assert decode_argument(text, schema) == value
