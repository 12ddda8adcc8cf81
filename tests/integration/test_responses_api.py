"""OpenAI's Responses API through the official `openai` SDK, unmodified, against the real server: a response
whole and streamed with its typed events, a tools loop continued by `previous_response_id`, stored responses
(get, delete, another account's id), and errors in OpenAI's shape."""

import json
from typing import Any

import httpx
import openai
import pytest

from tests.integration.conftest import SMOLLM, Gateway
from tests.integration.server import Server

pytestmark = pytest.mark.integration

WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def client(url: str, api_key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=api_key, max_retries=0, timeout=120)


def test_a_response_answers_text_with_usage(server: Server) -> None:
    response = client(server.url).responses.create(
        model=SMOLLM,
        instructions="Answer briefly.",
        input="Name a colour.",
        max_output_tokens=12,
        temperature=0,
    )
    assert response.id.startswith("resp_") and response.object == "response" and response.model == SMOLLM
    assert response.status in ("completed", "incomplete") and response.output_text
    [message] = response.output
    assert message.type == "message" and message.role == "assistant"
    assert response.usage is not None and response.usage.input_tokens > 5
    assert 0 < response.usage.output_tokens <= 12
    if response.status == "incomplete":
        assert response.incomplete_details is not None
        assert response.incomplete_details.reason == "max_output_tokens"


def test_a_streamed_response_sends_typed_events_that_add_up_to_the_final_response(server: Server) -> None:
    events = list(
        client(server.url).responses.create(
            model=SMOLLM,
            input=[{"role": "user", "content": "Count to three."}],
            max_output_tokens=16,
            stream=True,
        )
    )
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert [event.sequence_number for event in events] == list(range(len(events)))
    text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    final: Any = events[-1]
    assert text and final.response.output_text == text
    assert {"response.output_item.added", "response.content_part.added", "response.output_text.done"} <= set(
        kinds
    )


def test_a_tools_loop_continues_by_previous_response_id(server: Server) -> None:
    api = client(server.url)
    first = api.responses.create(
        model=SMOLLM,
        input="What is the weather in Oslo?",
        tools=[WEATHER],
        tool_choice="required",
        max_output_tokens=96,
        temperature=0,
    )
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1, first.output_text
    call = calls[0]
    assert call.name == "get_weather" and isinstance(json.loads(call.arguments), dict)
    second = api.responses.create(
        model=SMOLLM,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 degrees."}],
        tools=[WEATHER],
        max_output_tokens=24,
        temperature=0,
    )
    assert second.output and second.previous_response_id == first.id
    assert second.usage is not None and first.usage is not None
    # The history came back from the store: this turn's prompt holds the first turn's prompt and its call.
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens


def test_a_stored_response_can_be_read_and_deleted(server: Server) -> None:
    api = client(server.url)
    created = api.responses.create(model=SMOLLM, input="Say hi.", max_output_tokens=4, temperature=0)
    fetched = api.responses.retrieve(created.id)
    assert (fetched.id, fetched.output_text, fetched.usage) == (
        created.id,
        created.output_text,
        created.usage,
    )
    api.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        api.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError) as unknown:
        api.responses.create(model=SMOLLM, input="Hi", previous_response_id=created.id, max_output_tokens=4)
    assert "previous_response_id" in str(unknown.value.body)
    unstored = api.responses.create(model=SMOLLM, input="Say hi.", max_output_tokens=4, store=False)
    with pytest.raises(openai.NotFoundError):
        api.responses.retrieve(unstored.id)


def test_a_stored_response_lists_its_own_input_items_a_page_at_a_time(server: Server) -> None:
    api = client(server.url)
    first = api.responses.create(model=SMOLLM, input="Say hi.", max_output_tokens=4, temperature=0)
    sent: Any = [
        {"role": "user", "content": "Name a colour."},
        {"type": "message", "role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Another?", "id": "msg_mine"},
    ]
    second = api.responses.create(
        model=SMOLLM, input=sent, previous_response_id=first.id, max_output_tokens=4, temperature=0
    )
    items = [item.model_dump() for item in api.responses.input_items.list(second.id, order="asc")]
    assert [(item["type"], item["role"]) for item in items] == [
        ("message", "user"),
        ("message", "assistant"),
        ("message", "user"),
    ]
    assert items[2]["id"] == "msg_mine" and items[0]["content"][0]["text"] == "Name a colour."
    newest = api.responses.input_items.list(second.id, limit=1)
    assert [item.id for item in newest.data] == ["msg_mine"] and newest.has_more
    older = api.responses.input_items.list(second.id, limit=5, after="msg_mine").data
    assert [item.id for item in older] == [items[1]["id"], items[0]["id"]]
    [own] = [item.model_dump() for item in api.responses.input_items.list(first.id).data]
    assert own["type"] == "message" and own["content"][0]["text"] == "Say hi."
    answer = httpx.get(f"{server.url}/v1/responses/{second.id}/input_items?after=msg_nope", timeout=30)
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "after"
    answer = httpx.get(f"{server.url}/v1/responses/{second.id}/input_items?limit=0", timeout=30)
    assert answer.status_code == 400 and "limit" in answer.text
    api.responses.delete(second.id)
    with pytest.raises(openai.NotFoundError):
        api.responses.input_items.list(second.id)


def test_bad_requests_name_the_field_in_openais_envelope(server: Server) -> None:
    for body, field in (
        ({"model": SMOLLM}, "input"),
        ({"model": SMOLLM, "input": [{"type": "web_search_call"}]}, "input"),
        ({"model": SMOLLM, "input": "hi", "tools": [{"type": "web_search"}]}, "tools"),
        ({"model": SMOLLM, "input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
    ):
        answer = httpx.post(f"{server.url}/v1/responses", json=body, timeout=30)
        assert answer.status_code == 400, (body, answer.text)
        error = answer.json()["error"]
        assert error["type"] == "invalid_request_error" and field in f"{error['message']} {error['param']}"


def test_another_accounts_response_is_not_found(gateway_sqlite: Gateway) -> None:
    url, ids = gateway_sqlite.server.url, gateway_sqlite.ids
    mine = client(url, ids.run).responses.create(model=SMOLLM, input="Say hi.", max_output_tokens=4)
    assert client(url, ids.run).responses.retrieve(mine.id).id == mine.id
    with pytest.raises(openai.NotFoundError):
        client(url, ids.other).responses.retrieve(mine.id)
    with pytest.raises(openai.NotFoundError):
        client(url, ids.other).responses.input_items.list(mine.id)
    with pytest.raises(openai.NotFoundError):  # same account, but a token for @cf/google/* models only
        client(url, ids.narrow).responses.retrieve(mine.id)
    with pytest.raises(openai.PermissionDeniedError):  # same account, a token that may not run models
        client(url, ids.usage_only).responses.delete(mine.id)
    assert client(url, ids.run).responses.retrieve(mine.id).id == mine.id
    with pytest.raises(openai.NotFoundError):
        client(url, ids.other).responses.create(
            model=SMOLLM, input="Hi", previous_response_id=mine.id, max_output_tokens=4
        )
