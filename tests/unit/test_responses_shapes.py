"""Responses API bodies in, the chat core's request out; the core's answer out as output items and stream
events. Pure shapes: no server."""

from typing import Any

import pytest
from pydantic import ValidationError

from cirrus.api.openai.responses import OutputWriter, output_items
from cirrus.api.openai.responses_schemas import ResponsesRequest
from cirrus.chat import ChatDelta, ChatResult, ToolCall
from cirrus.families import ToolCallDelta
from cirrus.runtime.params import Usage

CALL = ToolCall("call_1", "get_weather", '{"city": "Oslo"}')
WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}


def request(**fields: Any) -> ResponsesRequest:
    return ResponsesRequest.model_validate({"model": "@cf/x/y", "input": "Hi", **fields})


def test_input_items_become_chat_turns_after_the_instructions_and_history() -> None:
    body = request(
        instructions="Be brief.",
        input=[
            {"role": "developer", "content": "Use tools."},
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "Weather in Oslo?"}],
            },
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": '{"city": "Oslo"}',
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "Sunny"},
        ],
    )
    history = [{"role": "user", "content": "Earlier"}]
    chat = body.chat_request(history)
    assert chat.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Earlier"},
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
    ]


def test_tools_choice_format_reasoning_and_limits_reach_the_chat_request() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    chat = request(
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=40,
        temperature=0.2,
    ).chat_request([])
    assert chat.options.tool_choice == "get_weather" and (chat.max_tokens, chat.sampling.temperature) == (
        40,
        0.2,
    )
    structured = request(
        text={"format": {"type": "json_schema", "name": "a", "schema": schema}}
    ).chat_request([])
    assert structured.options.json_format is not None and structured.options.json_format.schema == schema
    assert request(reasoning={"effort": "high"}).chat_request([]).options.enable_thinking is True
    assert request(reasoning={"effort": "minimal"}).chat_request([]).options.enable_thinking is False


@pytest.mark.parametrize(
    "fields",
    [
        {"input": [{"type": "web_search_call", "id": "x"}]},
        {"tools": [{"type": "web_search"}]},
        {"max_output_tokens": 0},
        {"input": []},
    ],
)
def test_what_cirrus_cannot_serve_is_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        request(**fields)


def test_the_answer_becomes_reasoning_message_and_function_call_items() -> None:
    items = output_items(ChatResult("Think.", "Checking.", (CALL,), "tool_calls", 1, Usage(5, 5)))
    assert [item["type"] for item in items] == ["reasoning", "message", "function_call"]
    assert items[1]["content"][0]["text"] == "Checking." and items[2]["call_id"] == "call_1"


def test_a_stream_opens_each_item_once_and_closes_it_before_the_next() -> None:
    writer = OutputWriter()
    events = [
        *writer.delta(ChatDelta(reasoning="Think")),
        *writer.delta(ChatDelta(content="Check")),
        *writer.delta(ChatDelta(content="ing.")),
        *writer.delta(ChatDelta(tool_calls=(ToolCallDelta(0, CALL),))),
        *writer.close(),
    ]
    assert [(e["type"], e["output_index"]) for e in events] == [
        ("response.output_item.added", 0),
        ("response.reasoning_text.delta", 0),
        ("response.reasoning_text.done", 0),
        ("response.output_item.done", 0),
        ("response.output_item.added", 1),
        ("response.content_part.added", 1),
        ("response.output_text.delta", 1),
        ("response.output_text.delta", 1),
        ("response.output_text.done", 1),
        ("response.content_part.done", 1),
        ("response.output_item.done", 1),
        ("response.output_item.added", 2),
        ("response.function_call_arguments.delta", 2),
        ("response.function_call_arguments.done", 2),
        ("response.output_item.done", 2),
    ]
    assert [item["type"] for item in writer.items] == ["reasoning", "message", "function_call"]
    assert writer.items[1]["content"][0]["text"] == "Checking."
    added, done = events[4]["item"], events[10]["item"]
    assert added["id"] == done["id"] and done["status"] == "completed"
