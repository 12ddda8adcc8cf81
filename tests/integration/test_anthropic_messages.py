"""Anthropic's Messages API through the official `anthropic` SDK, unmodified, against the real server: text
whole and streamed, a tools loop, errors in Anthropic's envelope, and (on scripted GLM checkpoints) thinking
blocks and a native tool call."""

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from cirrus.families.registry import family
from cirrus.testing.scripted import write_scripted
from cirrus.testing.scripts import (
    ANSWER,
    GLM45_TOOL_CALL,
    GLM47_ANSWER,
    REASONING,
    TOOL_REASONING,
    WEATHER_CALL,
)
from tests.integration.conftest import SMOLLM, Gateway
from tests.integration.server import Server, running_server

pytestmark = pytest.mark.integration

ASK: Any = [{"role": "user", "content": "What is the weather in Oslo?"}]
WEATHER: Any = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
GREEDY = {"temperature": 0}  # the SDK no longer types temperature; older clients still send it
GLM_TOOLS = "@cf/test/glm-4.5-scripted"
GLM_ANSWER = "@cf/test/glm-4.7-flash-scripted"


def client(url: str, api_key: str = "unused") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=api_key, max_retries=0, timeout=120)


def test_a_message_answers_text_with_anthropics_usage(server: Server) -> None:
    system: Any = [{"type": "text", "text": "You answer in one short sentence."}]
    message = client(server.url).messages.create(
        model=SMOLLM, max_tokens=12, system=system, messages=ASK, extra_body=GREEDY
    )
    assert message.id.startswith("msg_") and message.model == SMOLLM and message.role == "assistant"
    [block] = message.content
    assert block.type == "text" and block.text
    assert message.stop_reason in ("end_turn", "max_tokens")
    usage = message.usage
    assert usage.input_tokens + (usage.cache_read_input_tokens or 0) > 10 and 0 < usage.output_tokens <= 12


def test_a_streamed_message_gives_the_same_text_as_its_final_message(server: Server) -> None:
    with client(server.url).messages.stream(
        model=SMOLLM, max_tokens=16, messages=ASK, extra_body=GREEDY
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.content[0].type == "text" and final.content[0].text == text
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert (
        final.usage.output_tokens > 0
        and final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) > 0
    )


def test_a_tools_loop_calls_the_tool_then_answers_from_its_result(server: Server) -> None:
    api = client(server.url)
    first = api.messages.create(
        model=SMOLLM,
        max_tokens=48,
        messages=ASK,
        tools=[WEATHER],
        tool_choice={"type": "any"},
        extra_body=GREEDY,
    )
    assert first.stop_reason == "tool_use"
    [call] = [block for block in first.content if block.type == "tool_use"]
    assert call.name == "get_weather" and isinstance(call.input, dict)
    result: Any = {"type": "tool_result", "tool_use_id": call.id, "content": "Sunny, 21 degrees."}
    history: Any = [
        *ASK,
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": [result]},
    ]
    second = api.messages.create(
        model=SMOLLM,
        max_tokens=24,
        messages=history,
        tools=[WEATHER],
        tool_choice={"type": "none"},
        extra_body=GREEDY,
    )
    assert second.stop_reason in ("end_turn", "max_tokens")
    assert second.content[0].type == "text" and second.content[0].text


def test_a_streamed_tool_call_accumulates_into_its_input(server: Server) -> None:
    with client(server.url).messages.stream(
        model=SMOLLM,
        max_tokens=48,
        messages=ASK,
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
    ) as stream:
        final = stream.get_final_message()
    [call] = [block for block in final.content if block.type == "tool_use"]
    assert call.name == "get_weather" and isinstance(call.input, dict)
    assert final.stop_reason == "tool_use"


def test_bad_requests_answer_in_anthropics_error_envelope(server: Server) -> None:
    missing = httpx.post(f"{server.url}/v1/messages", json={"model": SMOLLM, "messages": ASK}, timeout=30)
    assert missing.status_code == 400
    body = missing.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in body["error"]["message"]
    with pytest.raises(anthropic.NotFoundError) as unknown:
        client(server.url).messages.create(model="@cf/nobody/nothing", max_tokens=8, messages=ASK)
    assert unknown.value.status_code == 404
    image: Any = [{"role": "user", "content": [{"type": "image", "source": {}}]}]
    with pytest.raises(anthropic.BadRequestError) as refused:
        client(server.url).messages.create(model=SMOLLM, max_tokens=8, messages=image)
    assert "content" in str(refused.value)


def test_the_gateway_takes_the_token_from_x_api_key(gateway_sqlite: Gateway) -> None:
    url = gateway_sqlite.server.url
    message = client(url, api_key=gateway_sqlite.ids.run).messages.create(
        model=SMOLLM, max_tokens=4, messages=ASK
    )
    assert message.content[0].type == "text"
    with pytest.raises(anthropic.AuthenticationError) as refused:
        client(url, api_key="not-a-token").messages.create(model=SMOLLM, max_tokens=4, messages=ASK)
    assert refused.value.body == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "Authentication error"},
    }


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("anthropic-scripted")
    entries = []
    for model, arch, name, script in (
        (GLM_TOOLS, "glm4moe", "glm45", GLM45_TOOL_CALL),
        (GLM_ANSWER, "deepseek2-glm", "glm47", GLM47_ANSWER),
    ):
        path = write_scripted(
            arch, directory / f"{name}.gguf", template=family(name).template(), script=script
        )
        entries.append(
            f'[[models]]\nid = "{model}"\nartifact = {{ path = "{path}" }}\ncontext_window = 512\n'
        )
    catalog = directory / "catalog.toml"
    catalog.write_text("\n".join(entries))
    with running_server(directory, "--catalog", str(catalog)) as running:
        yield running


def test_thinking_comes_back_as_a_thinking_block_whole_and_streamed(scripted: Server) -> None:
    api = client(scripted.url)
    thinking: Any = {"type": "enabled", "budget_tokens": 1024}
    message = api.messages.create(
        model=GLM_ANSWER, max_tokens=64, messages=ASK, thinking=thinking, extra_body=GREEDY
    )
    assert [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in message.content] == [
        ("thinking", REASONING),
        ("text", ANSWER),
    ]
    with api.messages.stream(model=GLM_ANSWER, max_tokens=64, messages=ASK, extra_body=GREEDY) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[1].type == "text" and final.content[1].text == ANSWER
    plain = api.messages.create(
        model=GLM_ANSWER, max_tokens=64, messages=ASK, thinking={"type": "disabled"}, extra_body=GREEDY
    )
    assert [b.type for b in plain.content] == ["text"]


def test_a_native_tool_call_comes_back_as_a_tool_use_block(scripted: Server) -> None:
    tools: Any = [WEATHER]
    message = client(scripted.url).messages.create(
        model=GLM_TOOLS, max_tokens=64, messages=ASK, tools=tools, extra_body=GREEDY
    )
    assert message.stop_reason == "tool_use"
    assert message.content[0].type == "thinking" and message.content[0].thinking == TOOL_REASONING
    [call] = [b for b in message.content if b.type == "tool_use"]
    assert (call.name, call.input) == WEATHER_CALL
    assert json.dumps(call.input)


def test_a_stop_sequence_of_the_request_ends_the_answer_and_is_named(scripted: Server) -> None:
    api = client(scripted.url)
    asked = {"model": GLM_ANSWER, "max_tokens": 64, "messages": ASK, "stop_sequences": [" in", "never"]}
    message = api.messages.create(**asked, thinking={"type": "disabled"}, extra_body=GREEDY)
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", " in")
    assert message.content[-1].type == "text" and message.content[-1].text == ANSWER.split(" in")[0]
    with api.messages.stream(**asked, extra_body=GREEDY) as stream:
        opened = next(event for event in stream if event.type == "message_start")
        final = stream.get_final_message()
    assert opened.message.usage.input_tokens + (opened.message.usage.cache_read_input_tokens or 0) > 5
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", " in")
    ended = api.messages.create(model=GLM_ANSWER, max_tokens=64, messages=ASK, extra_body=GREEDY)
    assert (ended.stop_reason, ended.stop_sequence) == (
        "end_turn",
        None,
    )  # the family's `<|user|>` is no stop_sequence
