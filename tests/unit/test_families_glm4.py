"""The GLM-4 chat family (GLM-4-9B-chat, GLM-4-0414, GLM-Edge): golden renderings written out from the format
its official templates and ms-swift's GLM4AgentTemplate document (not produced by the code), recognition of
its templates, and the `NAME\\n{json}` tool-call parser, whole and streamed."""

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from cirrus.families import FamilyInputError, family, family_of_template, parse_output
from cirrus.families.glm4 import Glm4ToolCallParser
from cirrus.families.render import render_template
from cirrus.families.toolcalls import ParsedToolCalls, ToolCallUpdate

GLM4 = family("glm4")

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "天气",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
COUNT_TOOL = {
    "type": "function",
    "function": {"name": "count", "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}}},
}
TOOLS_BLOCK = (
    "<|system|>\n# 可用工具\n\n## get_weather\n\n"
    "{\n"
    '    "name": "get_weather",\n'
    '    "description": "天气",\n'
    '    "parameters": {\n'
    '        "type": "object",\n'
    '        "properties": {\n'
    '            "city": {\n'
    '                "type": "string"\n'
    "            }\n"
    "        }\n"
    "    }\n"
    "}\n"
    "在调用上述函数时，请使用 Json 格式表示调用的参数。"
)


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


class TestRendering:
    def test_system_and_user(self) -> None:
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
        assert GLM4.render(messages) == "[gMASK]<sop><|system|>\nBe brief.<|user|>\nHi<|assistant|>"

    def test_multi_turn(self) -> None:
        messages = [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "\nHello!"},
            {"role": "user", "content": "2+2?"},
        ]
        assert (
            GLM4.render(messages)
            == "[gMASK]<sop><|user|>\nHi<|assistant|>\nHello!<|user|>\n2+2?<|assistant|>"
        )

    def test_tools_are_described_in_a_system_turn_before_the_conversation(self) -> None:
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Oslo?"}]
        assert GLM4.render(messages, [WEATHER_TOOL]) == (
            f"[gMASK]<sop>{TOOLS_BLOCK}<|system|>\nBe brief.<|user|>\nOslo?<|assistant|>"
        )

    def test_a_call_is_its_own_assistant_turn_and_its_result_an_observation(self) -> None:
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": "Weather in Oslo?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [call("c1", "get_weather", '{"city":"Oslo"}')],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "12 C"},
        ]
        assert GLM4.render(messages) == (
            "[gMASK]<sop><|user|>\nWeather in Oslo?"
            '<|assistant|>get_weather\n{"city": "Oslo"}'
            "<|observation|>\n12 C<|assistant|>"
        )

    def test_text_then_several_calls_then_their_results(self) -> None:
        calls = [
            call("c1", "get_weather", '{"city": "Oslo"}'),
            call("c2", "get_weather", '{"city": "Bergen"}'),
        ]
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": "Oslo and Bergen?"},
            {"role": "assistant", "content": "Let me look. ", "tool_calls": calls},
            {"role": "tool", "tool_call_id": "c1", "content": "12 C"},
            {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "9 C"}]},
        ]
        assert GLM4.render(messages) == (
            "[gMASK]<sop><|user|>\nOslo and Bergen?"
            "<|assistant|>\nLet me look."
            '<|assistant|>get_weather\n{"city": "Oslo"}'
            '<|assistant|>get_weather\n{"city": "Bergen"}'
            "<|observation|>\n12 C<|observation|>\n9 C<|assistant|>"
        )

    def test_arguments_keep_their_characters(self) -> None:
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": "北京?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [call("c1", "get_weather", '{"city":"北京"}')],
            },
        ]
        assert GLM4.render(messages).endswith('<|assistant|>get_weather\n{"city": "北京"}<|assistant|>')

    def test_without_the_generation_prompt(self) -> None:
        messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
        rendered = render_template(GLM4.template(), messages, add_generation_prompt=False)
        assert rendered == "[gMASK]<sop><|user|>\nHi<|assistant|>\nHello"

    def test_there_is_no_thinking_switch(self) -> None:
        with pytest.raises(FamilyInputError, match="no thinking switch"):
            GLM4.render([{"role": "user", "content": "Hi"}], enable_thinking=False)

    def test_the_models_own_template_is_not_used(self) -> None:
        """GLM-4's own templates want `metadata` and role `observation`: they would drop OpenAI tool turns."""
        own = "{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
        messages = [{"role": "user", "content": "Hi"}]
        assert GLM4.render(messages, template=own) == "[gMASK]<sop><|user|>\nHi<|assistant|>"


# Fragments of the official templates, as far as recognition reads them.
GLM4_0414_TEMPLATE = (
    "[gMASK]<sop>{%- if tools -%}<|system|>\n# 可用工具\n{% for tool in tools %}"
    "\n\n## {{ function.name }}\n\n{{ function | tojson(indent=4, ensure_ascii=False) }}\n"
    "在调用上述函数时，请使用 Json 格式表示调用的参数。{%- endfor %}{%- endif -%}"
    "{%- elif role == 'observation' %}<|observation|>\n{{ content }}"
)
GLM4_9B_CHAT_TEMPLATE = (
    "[gMASK]<sop>{% for item in messages %}{% if item['tools'] is defined %}<|system|>\n# 可用工具"
    "{% for tool in tools %}\n\n## {{ tool['function']['name'] }}\n\n{{ tool['function'] | tojson(indent=4) }}\n"
    "在调用上述函数时，请使用 Json 格式表示调用的参数。{% endfor %}{% endif %}"
    "{% if item['content'] %}<|{{ item['role'] }}|>{{ item['metadata'] }}\n{{ item['content'] }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
GLM_EDGE_TEMPLATE = (
    "{% for item in messages %}{% if item['role'] == 'system' %}<|system|>\n{{ item['content'] }}"
    "{% elif item['role'] == 'user' %}<|user|>\n{{ item['content'] }}{% elif item['role'] == 'assistant' %}"
    "<|assistant|>\n{{ item['content'] }}{% endif %}{% endfor %}<|assistant|>"
)


class TestRecognition:
    @pytest.mark.parametrize(
        "template",
        [GLM4_0414_TEMPLATE, GLM4_9B_CHAT_TEMPLATE, GLM4.template()],
        ids=["0414", "9b-chat", "ours"],
    )
    def test_glm4_templates_are_glm4(self, template: str) -> None:
        assert family_of_template(template) is GLM4

    @pytest.mark.parametrize("name", ["glm45", "glm47"])
    def test_later_glm_templates_keep_their_family(self, name: str) -> None:
        template = family(name).template()
        assert "[gMASK]<sop>" in template and "<|observation|>" in template
        assert family_of_template(template) is family(name)
        # even with GLM-4's tool instructions pasted in, GLM-4.5's markup decides
        assert family_of_template(template + GLM4_0414_TEMPLATE) is family(name)

    def test_glm_edge_and_chatglm3_templates_are_not_recognised(self) -> None:
        assert family_of_template(GLM_EDGE_TEMPLATE) is None  # its catalog entry names the family
        chatglm3 = (
            "[gMASK]sop{% for m in messages %}<|{{ m.role }}|>\n 请使用 Json 格式表示调用的参数{% endfor %}"
        )
        assert family_of_template(chatglm3) is None


# ---- parsing ------------------------------------------------------------------------------------------------


def whole(text: str) -> list[str]:
    return [text]


def one_char_pieces(text: str) -> list[str]:
    return list(text)


SPLITS = [whole, one_char_pieces]


def parse(
    text: str, split: Callable[[str], list[str]], tools: Sequence[dict[str, Any]] = (WEATHER_TOOL, COUNT_TOOL)
) -> ParsedToolCalls:
    parser = Glm4ToolCallParser(tools)
    update = ToolCallUpdate()
    for piece in split(text):
        update = update + parser.feed(piece)
    update = update + parser.finish()
    return ParsedToolCalls(update.content, tuple(d.call for d in update.tool_calls), parser.malformed)


def calls(parsed: ParsedToolCalls) -> list[tuple[str, str]]:
    return [(c.name, c.arguments) for c in parsed.tool_calls]


@pytest.mark.parametrize("split", SPLITS)
class TestParsing:
    def test_a_call(self, split: Callable[[str], list[str]]) -> None:
        parsed = parse('get_weather\n{"city": "Paris"}', split)
        assert calls(parsed) == [("get_weather", '{"city": "Paris"}')]
        assert (parsed.content, parsed.malformed) == ("", False)

    def test_whitespace_around_a_call_and_spaces_after_the_name(
        self, split: Callable[[str], list[str]]
    ) -> None:
        parsed = parse('\n get_weather \n{"city":"Paris"}\n', split)
        assert calls(parsed) == [("get_weather", '{"city": "Paris"}')] and parsed.content == ""

    def test_arguments_are_fitted_to_the_schema(self, split: Callable[[str], list[str]]) -> None:
        parsed = parse('count\n{"n": "3"}', split)
        assert calls(parsed) == [("count", '{"n": 3}')]
        assert calls(parse('get_weather\n{"city": "3", "x": "4"}', split)) == [
            ("get_weather", '{"city": "3", "x": "4"}')  # a string parameter, and an undeclared one, stay text
        ]

    def test_plain_text(self, split: Callable[[str], list[str]]) -> None:
        parsed = parse("\nIt is sunny.\nget_weather says so.", split)
        assert (parsed.content, parsed.tool_calls, parsed.malformed) == (
            "\nIt is sunny.\nget_weather says so.",
            (),
            False,
        )

    def test_an_unknown_tool_name_stays_text(self, split: Callable[[str], list[str]]) -> None:
        parsed = parse('get_news\n{"topic": "sports"}', split)
        assert (parsed.content, parsed.tool_calls, parsed.malformed) == (
            'get_news\n{"topic": "sports"}',
            (),
            False,
        )

    def test_a_tool_name_then_prose_stays_text(self, split: Callable[[str], list[str]]) -> None:
        parsed = parse("count\nthe sheep before you sleep", split)
        assert (parsed.content, parsed.tool_calls, parsed.malformed) == (
            "count\nthe sheep before you sleep",
            (),
            False,
        )

    def test_bad_json_stays_text_and_is_flagged(self, split: Callable[[str], list[str]]) -> None:
        for text in ('get_weather\n{"city": Paris}', 'get_weather\n{"city": "Pa'):
            parsed = parse(text, split)
            assert (parsed.content, parsed.tool_calls, parsed.malformed) == (text, (), True)

    def test_text_before_a_call_in_its_own_turn(self, split: Callable[[str], list[str]]) -> None:
        parsed = parse('Let me check.\n<|assistant|>get_weather\n{"city": "Oslo"}', split)
        assert parsed.content == "Let me check."
        assert calls(parsed) == [("get_weather", '{"city": "Oslo"}')]

    def test_several_calls_each_in_its_own_turn(self, split: Callable[[str], list[str]]) -> None:
        text = 'get_weather\n{"city": "Oslo"}<|assistant|>count\n{"n": 2}\n<|assistant|>get_weather\n{"city": "X"}'
        parsed = parse(text, split)
        assert calls(parsed) == [
            ("get_weather", '{"city": "Oslo"}'),
            ("count", '{"n": 2}'),
            ("get_weather", '{"city": "X"}'),
        ]
        assert (parsed.content, parsed.malformed) == ("", False)

    def test_a_turn_that_is_no_call_is_given_back_as_written(self, split: Callable[[str], list[str]]) -> None:
        parsed = parse('get_weather\n{"city": "Oslo"}<|assistant|>\nDone.', split)
        assert calls(parsed) == [("get_weather", '{"city": "Oslo"}')]
        assert (parsed.content, parsed.malformed) == ("<|assistant|>\nDone.", False)

    def test_text_after_a_call_is_content(self, split: Callable[[str], list[str]]) -> None:
        parsed = parse('get_weather\n{"city": "Oslo"}\n\nThat is all.', split)
        assert calls(parsed) == [("get_weather", '{"city": "Oslo"}')] and parsed.content == "That is all."

    def test_without_tools_nothing_is_a_call(self, split: Callable[[str], list[str]]) -> None:
        parsed = parse('get_weather\n{"city": "Oslo"}', split, tools=())
        assert (parsed.content, parsed.tool_calls) == ('get_weather\n{"city": "Oslo"}', ())


class TestStreaming:
    def test_text_is_held_back_only_while_it_could_be_a_call(self) -> None:
        parser = Glm4ToolCallParser([WEATHER_TOOL])
        assert parser.feed("Hel").content == "Hel"  # no tool name starts so
        parser = Glm4ToolCallParser([WEATHER_TOOL])
        assert parser.feed("get").content == ""  # could be get_weather
        assert parser.feed(" ready").content == "get ready"
        parser = Glm4ToolCallParser([WEATHER_TOOL])
        assert parser.feed("get_weather\n{").content == ""
        assert parser.feed('"city": "Oslo"').content == ""  # an open object
        (delta,) = parser.feed("}").tool_calls
        assert (delta.index, delta.call.name, delta.call.arguments) == (0, "get_weather", '{"city": "Oslo"}')

    def test_a_partial_turn_marker_is_held_then_given_back(self) -> None:
        parser = Glm4ToolCallParser([WEATHER_TOOL])
        assert parser.feed("Yes <|assis").content == "Yes"
        assert parser.feed("t").content == ""
        assert parser.finish().content == " <|assist"

    def test_each_call_has_its_own_id_and_index(self) -> None:
        parsed = parse('count\n{"n": 1}<|assistant|>count\n{"n": 2}', one_char_pieces)
        assert len({c.id for c in parsed.tool_calls}) == 2


class TestThroughTheFamily:
    def test_a_plain_answer_loses_the_line_break_after_the_prompt(self) -> None:
        output = parse_output(GLM4.output_parser([WEATHER_TOOL]), "\nIt is sunny in Paris.")
        assert (output.content, output.tool_calls, output.finish_reason) == (
            "It is sunny in Paris.",
            (),
            None,
        )

    def test_a_call_finishes_with_tool_calls(self) -> None:
        output = parse_output(GLM4.output_parser([WEATHER_TOOL]), 'get_weather\n{"city": "Paris"}')
        assert [(c.name, c.arguments) for c in output.tool_calls] == [("get_weather", '{"city": "Paris"}')]
        assert (output.content, output.reasoning, output.finish_reason) == ("", "", "tool_calls")

    def test_turns_end_where_glm4_ends_them(self) -> None:
        assert set(GLM4.stop) == {"<|user|>", "<|observation|>"}
