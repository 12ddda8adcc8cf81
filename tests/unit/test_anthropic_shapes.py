"""Anthropic Messages bodies in, the chat core's request out; the core's answer out as Anthropic's content blocks
and stream events. Pure shapes: no server."""

import json
from typing import Any

import pytest
from pydantic import ValidationError

from cirrus.api.anthropic.messages import BlockWriter, StopReason, content_blocks, usage_body
from cirrus.api.anthropic.schemas import MessagesRequest
from cirrus.chat import ChatDelta, ChatResult, ToolCall
from cirrus.families import ToolCallDelta
from cirrus.runtime.params import Usage

WEATHER = {
    "name": "get_weather",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
CALL = ToolCall("toolu_1", "get_weather", '{"city": "Oslo"}')


def request(**fields: Any) -> MessagesRequest:
    base = {"model": "@cf/x/y", "max_tokens": 32, "messages": [{"role": "user", "content": "Hi"}]}
    return MessagesRequest.model_validate({**base, **fields})


def test_a_tools_conversation_becomes_openai_shaped_messages_in_order() -> None:
    body = request(
        system=[{"type": "text", "text": "Be brief."}],
        messages=[
            {"role": "user", "content": "Weather in Oslo?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Call it.", "signature": "abc"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "Sunny"}],
                    },
                    {"type": "text", "text": "And tomorrow?"},
                ],
            },
        ],
    )
    assert body.chat_messages() == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                }
            ],
            "reasoning_content": "Call it.",
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "Sunny"},
        {"role": "user", "content": "And tomorrow?"},
    ]


def test_tools_tool_choice_thinking_and_structured_output_reach_the_chat_options() -> None:
    chat = request(
        tools=[WEATHER], tool_choice={"type": "any"}, thinking={"type": "enabled", "budget_tokens": 2048}
    ).chat_request()
    options = chat.options
    assert options.tool_choice == "required" and options.enable_thinking is True
    assert options.tools[0]["function"]["parameters"] == WEATHER["input_schema"]
    assert (chat.max_tokens, chat.sampling.temperature) == (32, 1.0)
    named = request(tools=[WEATHER], tool_choice={"type": "tool", "name": "get_weather"}).chat_request()
    assert named.options.tool_choice == "get_weather"
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    structured = request(output_config={"format": {"type": "json_schema", "schema": schema}}).chat_request()
    assert structured.options.json_format is not None and structured.options.json_format.schema == schema
    assert request(thinking={"type": "disabled"}).chat_request().options.enable_thinking is False


@pytest.mark.parametrize(
    "fields, named",
    [
        ({"max_tokens": None}, "max_tokens"),
        ({"messages": [{"role": "system", "content": "x"}]}, "role"),
        ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "content"),
        ({"temperature": 1.5}, "temperature"),
    ],
)
def test_a_bad_body_names_the_field(fields: dict[str, Any], named: str) -> None:
    body = {"model": "@cf/x/y", "max_tokens": 32, "messages": [{"role": "user", "content": "Hi"}], **fields}
    with pytest.raises(ValidationError) as caught:
        MessagesRequest.model_validate({k: v for k, v in body.items() if v is not None})
    assert named in str(caught.value)


def test_the_answer_becomes_thinking_text_and_tool_use_blocks() -> None:
    result = ChatResult("Call it.", "Checking.", (CALL,), "tool_calls", 2, Usage(30, 10, cached_tokens=20))
    assert content_blocks(result) == [
        {"type": "thinking", "thinking": "Call it.", "signature": ""},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}},
    ]
    usage = usage_body(Usage(30, 10, cached_tokens=20))
    assert (usage["input_tokens"], usage["cache_read_input_tokens"], usage["output_tokens"]) == (10, 20, 10)


def test_the_stop_reason_names_a_stop_sequence_only_when_the_request_asked_for_it() -> None:
    stop = StopReason(["END", "###"])
    assert stop.fields("stop", "###") == {"stop_reason": "stop_sequence", "stop_sequence": "###"}
    assert stop.fields("stop", "<|user|>") == {
        "stop_reason": "end_turn",
        "stop_sequence": None,
    }  # the family's
    assert stop.fields("stop", None) == {
        "stop_reason": "end_turn",
        "stop_sequence": None,
    }  # end of generation
    assert stop.fields("tool_calls", None)["stop_reason"] == "tool_use"
    assert stop.fields("length", None)["stop_reason"] == "max_tokens"
    assert StopReason(None).fields("stop", "###")["stop_reason"] == "end_turn"


def test_a_stream_opens_one_block_per_kind_and_closes_it_when_the_next_starts() -> None:
    writer = BlockWriter()
    events = [
        *writer.delta(ChatDelta(reasoning="Call")),
        *writer.delta(ChatDelta(reasoning=" it.")),
        *writer.delta(ChatDelta(content="Checking.")),
        *writer.delta(ChatDelta(tool_calls=(ToolCallDelta(0, CALL),))),
        *writer.close(),
    ]
    shapes = [
        (e["type"], e["index"], (e.get("content_block") or e.get("delta") or {}).get("type")) for e in events
    ]
    assert shapes == [
        ("content_block_start", 0, "thinking"),
        ("content_block_delta", 0, "thinking_delta"),
        ("content_block_delta", 0, "thinking_delta"),
        ("content_block_stop", 0, None),
        ("content_block_start", 1, "text"),
        ("content_block_delta", 1, "text_delta"),
        ("content_block_stop", 1, None),
        ("content_block_start", 2, "tool_use"),
        ("content_block_delta", 2, "input_json_delta"),
        ("content_block_stop", 2, None),
    ]
    assert json.loads(events[8]["delta"]["partial_json"]) == {"city": "Oslo"}
