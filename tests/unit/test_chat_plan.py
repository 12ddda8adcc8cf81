"""The chat layer both protocols share: request options in, the worker's input and the parsed answer out.

GLM and Kimi outputs are fed through the same route-level parser (`ChatStream`, `parse_whole`) and the same
chunk writers the routes use, piece by piece as the engine streams them."""

import json
from typing import Any

import pytest

from cirrus.api.openai.chat import _deltas, _message
from cirrus.api.workers_ai.encode import result_body, stream_payloads
from cirrus.api.workers_ai.schemas import TextGenerationInput
from cirrus.chat.answer import ChatStream, parse_whole
from cirrus.chat.options import chat_options
from cirrus.chat.plan import plan_chat
from cirrus.chat.prompted import prompted_messages
from cirrus.errors import InvalidInput, JsonModeFailed
from cirrus.families import ChatDelta, family
from cirrus.runtime.params import GenerationInput, SamplingParams, Usage

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
ASK = [{"role": "user", "content": "Weather in Oslo?"}]
GLM47_ANSWER = (
    "The user wants Oslo.</think>"
    "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>"
)


def glm_plan(**options: Any) -> Any:
    merged = {"tools": TOOLS, "tool_choice": None, "response_format": None, "enable_thinking": None}
    merged.update(options)
    return plan_chat(family("glm47"), ASK, chat_options(stream=False, **merged), SamplingParams())


def streamed(plan: Any, text: str, size: int) -> tuple[ChatStream, ChatDelta]:
    stream = ChatStream(plan)
    total = ChatDelta()
    for start in range(0, len(text), size):
        total = total + stream.feed(text[start : start + size])
    return stream, total + stream.finish()


@pytest.mark.parametrize("size", [1, 3, 7, 1000])
def test_glm_output_streamed_becomes_reasoning_and_a_tool_call_on_both_protocols(size: int) -> None:
    stream, total = streamed(glm_plan(), GLM47_ANSWER, size)
    assert total.reasoning == "The user wants Oslo." and total.content == ""
    assert stream.finish_reason("stop") == "tool_calls"
    assert 0 < stream.reasoning_tokens(Usage(10, 30)) < 30  # estimated: no count from the worker
    assert stream.reasoning_tokens(Usage(10, 30, reasoning_tokens=7)) == 7
    openai_deltas = _deltas(total)
    assert openai_deltas[0] == {"reasoning_content": "The user wants Oslo."}
    call = openai_deltas[1]["tool_calls"][0]
    assert (call["index"], call["type"], call["function"]["name"]) == (0, "function", "get_weather")
    assert json.loads(call["function"]["arguments"]) == {"city": "Oslo"}
    workers = stream_payloads(total)
    assert workers[0] == {"response": "", "reasoning": "The user wants Oslo."}
    assert workers[1]["tool_calls"][0] | {"id": "x"} == {
        "id": "x",
        "name": "get_weather",
        "arguments": {"city": "Oslo"},
    }


def test_glm_whole_answer_in_each_protocols_fields() -> None:
    result = parse_whole(glm_plan(), GLM47_ANSWER, "stop", Usage(10, 30))
    message = _message(result)
    assert message["content"] is None and message["reasoning_content"] == "The user wants Oslo."
    assert message["tool_calls"][0]["function"]["arguments"] == '{"city": "Oslo"}'
    workers = result_body(result, json_mode=False)
    assert workers["reasoning"] == "The user wants Oslo." and workers["response"] == ""
    assert workers["tool_calls"][0]["arguments"] == {"city": "Oslo"}


def test_glm_plan_renders_with_the_family_and_its_stops() -> None:
    inputs = glm_plan(enable_thinking=False).inputs
    assert isinstance(inputs, GenerationInput)
    assert inputs.family == "glm47" and inputs.enable_thinking is False and inputs.tools
    assert "<|user|>" in inputs.sampling.stop and inputs.sampling.grammar is None
    assert GenerationInput.from_frame(json.loads(json.dumps(inputs.to_frame()))) == inputs


def test_kimi_output_through_the_route_parser() -> None:
    plan = plan_chat(family("kimi_k2"), ASK, chat_options(TOOLS, "auto", None, None, False), SamplingParams())
    text = (
        "<think>Need it.</think>Checking.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city": "Oslo"}<|tool_call_end|><|tool_calls_section_end|>'
    )
    result = parse_whole(plan, text, "stop", Usage(10, 20))
    assert (result.reasoning, result.content) == ("Need it.", "Checking.")
    assert result.tool_calls[0].id == "functions.get_weather:0"


def test_json_mode_turns_glm_thinking_off_and_checks_the_answer() -> None:
    plan = glm_plan(tools=None, response_format={"type": "json_object"})
    assert plan.inputs.enable_thinking is False and plan.inputs.sampling.grammar
    assert parse_whole(plan, '{"a": 1}', "stop", Usage(10, 5)).json_value == {"a": 1}
    with pytest.raises(JsonModeFailed, match="JSON Mode couldn't be met"):
        parse_whole(plan, '{"a": ', "length", Usage(10, 5))


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (
            {"enable_thinking": True, "response_format": {"type": "json_object"}, "tools": None},
            "thinking off",
        ),
        ({"tool_choice": "sometimes"}, "tool_choice"),
        ({"tools": [{"name": "f", "parameters": {"type": "array"}}]}, "describe an object"),
        ({"tools": [*TOOLS, *TOOLS]}, "more than once"),
    ],
)
def test_bad_options(options: dict[str, Any], says: str) -> None:
    with pytest.raises(InvalidInput, match=says):
        glm_plan(**options)


def test_kimi_has_no_thinking_switch() -> None:
    with pytest.raises(InvalidInput, match="kimi_k2 chat format has no thinking switch"):
        plan_chat(family("kimi_k2"), ASK, chat_options(None, None, None, True, False), SamplingParams())


def test_prompted_history_alternates_for_templates_that_insist() -> None:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
    }
    rewritten = prompted_messages(
        [
            *ASK,
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            {"role": "user", "content": "Thanks"},
        ],
        [],
    )
    assert [m["role"] for m in rewritten] == ["user", "assistant", "user"]
    assert json.loads(rewritten[1]["content"]) == {"name": "get_weather", "arguments": {"city": "Oslo"}}
    assert rewritten[2]["content"] == "Result of get_weather (call c1): sunny\n\nThanks"


def test_workers_ai_tool_calls_get_ids_and_results_find_them_by_name() -> None:
    body = TextGenerationInput.model_validate(
        {
            "messages": [
                *ASK,
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"name": "get_weather", "arguments": {}}],
                },
                {"role": "tool", "name": "get_weather", "content": "sunny"},
            ]
        }
    )
    messages = body.chat_messages()
    assert messages is not None
    call_id = messages[1]["tool_calls"][0]["id"]
    assert messages[2]["tool_call_id"] == call_id
    assert messages[1]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": "{}"}
