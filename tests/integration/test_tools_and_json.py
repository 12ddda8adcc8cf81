"""Tool calls, JSON mode and thinking switches against a real server and engine (SmolLM2, which has no native
tool format: its calls are prompted and grammar-constrained), with the official openai and cloudflare SDKs."""

import json
from collections.abc import Iterator
from typing import Any

import cloudflare
import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

from tests.integration.conftest import SMOLLM
from tests.integration.server import Server

ACCOUNT = "acct123"
WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}, "days": {"type": "integer"}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
TOOLS: list[ChatCompletionToolParam] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather forecast for a city",
            "parameters": WEATHER_PARAMETERS,
        },
    }
]
QUESTION: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What is the weather in Oslo?"}]
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


def assert_weather_arguments(arguments: dict[str, Any]) -> None:
    """Valid against WEATHER_PARAMETERS, checked by hand: exactly the required keys, of the right types."""
    assert set(arguments) == {"city", "days"}
    assert isinstance(arguments["city"], str) and len(arguments["city"]) <= 20
    assert isinstance(arguments["days"], int) and not isinstance(arguments["days"], bool)


def assert_person(value: Any) -> None:
    assert isinstance(value, dict) and set(value) == {"name", "age"}
    assert isinstance(value["name"], str) and isinstance(value["age"], int)


@pytest.fixture
def oai(server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="k", max_retries=0, timeout=120) as client:
        yield client


@pytest.fixture
def cf(server: Server) -> Iterator[cloudflare.Cloudflare]:
    with cloudflare.Cloudflare(
        api_token="test", base_url=f"{server.url}/client/v4", max_retries=0, timeout=120
    ) as client:
        yield client


# ---- the openai SDK: a tool-calling loop -------------------------------------------------------------------


def test_openai_tool_loop(oai: openai.OpenAI) -> None:
    first = oai.chat.completions.create(
        model=SMOLLM, messages=QUESTION, tools=TOOLS, tool_choice="required", temperature=0, max_tokens=48
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert calls and len(calls) == 1 and calls[0].type == "function"
    call = calls[0]
    assert call.function.name == "get_weather" and call.id.startswith("call_")
    assert_weather_arguments(json.loads(call.function.arguments))
    history: list[ChatCompletionMessageParam] = [
        *QUESTION,
        choice.message.model_dump(exclude_none=True),  # type: ignore[list-item]
        {"role": "tool", "tool_call_id": call.id, "content": '{"forecast": "sunny, 21 C"}'},
    ]
    final = oai.chat.completions.create(
        model=SMOLLM, messages=history, tools=TOOLS, tool_choice="none", temperature=0, max_tokens=24
    )
    assert final.choices[0].message.content
    assert final.choices[0].message.tool_calls is None
    assert final.choices[0].finish_reason in ("stop", "length")


def test_openai_tool_loop_streamed(oai: openai.OpenAI) -> None:
    stream = oai.chat.completions.create(
        model=SMOLLM,
        messages=QUESTION,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        temperature=0,
        max_tokens=48,
        stream=True,
        stream_options={"include_usage": True},
    )
    deltas, reasons, usage = [], [], None
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            deltas.extend(choice.delta.tool_calls or [])
            reasons.append(choice.finish_reason)
    assert len(deltas) == 1 and deltas[0].index == 0 and deltas[0].id and deltas[0].function
    assert deltas[0].function.name == "get_weather"
    assert_weather_arguments(json.loads(deltas[0].function.arguments or ""))
    assert reasons[-1] == "tool_calls"
    assert usage is not None and usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == 0
    history: list[ChatCompletionMessageParam] = [
        *QUESTION,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": deltas[0].id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": deltas[0].function.arguments or ""},
                }
            ],
        },
        {"role": "tool", "tool_call_id": deltas[0].id, "content": "sunny"},
    ]
    final = oai.chat.completions.create(
        model=SMOLLM, messages=history, temperature=0, max_tokens=16, stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in final if c.choices)
    assert text.strip()


def test_openai_auto_lets_the_model_answer_in_text_or_call(oai: openai.OpenAI) -> None:
    completion = oai.chat.completions.create(
        model=SMOLLM, messages=QUESTION, tools=TOOLS, temperature=0, max_tokens=48
    )
    message = completion.choices[0].message
    if message.tool_calls:  # either is right under "auto"; each must be well formed
        assert completion.choices[0].finish_reason == "tool_calls"
        call = message.tool_calls[0]
        assert call.type == "function"
        assert_weather_arguments(json.loads(call.function.arguments))
    else:
        assert message.content and not message.content.lstrip().startswith("{")


# ---- JSON mode ---------------------------------------------------------------------------------------------


def test_openai_json_object(oai: openai.OpenAI) -> None:
    completion = oai.chat.completions.create(
        model=SMOLLM,
        messages=[{"role": "user", "content": "Give a cat's name and color as a JSON object."}],
        response_format={"type": "json_object"},
        temperature=0,
        max_tokens=200,
    )
    assert isinstance(json.loads(completion.choices[0].message.content or ""), dict)


def test_openai_json_schema(oai: openai.OpenAI) -> None:
    completion = oai.chat.completions.create(
        model=SMOLLM,
        messages=[{"role": "user", "content": "Invent a person."}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "person", "schema": PERSON, "strict": True},
        },
        temperature=0,
        max_tokens=64,
    )
    assert_person(json.loads(completion.choices[0].message.content or ""))


def test_json_mode_that_cannot_be_met(oai: openai.OpenAI, cf: cloudflare.Cloudflare) -> None:
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        oai.chat.completions.create(
            model=SMOLLM,
            messages=[{"role": "user", "content": "Invent a person."}],
            response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}},
            max_tokens=3,
        )
    assert caught.value.body["message"] == "JSON Mode couldn't be met"  # type: ignore[index]
    with pytest.raises(cloudflare.UnprocessableEntityError) as cf_caught:
        cf.ai.run(
            SMOLLM,
            account_id=ACCOUNT,
            messages=[{"role": "user", "content": "Invent a person."}],
            response_format={"type": "json_schema", "json_schema": PERSON},
            max_tokens=3,
        )
    assert "JSON Mode couldn't be met" in str(cf_caught.value)


# ---- the cloudflare SDK --------------------------------------------------------------------------------------


def test_cloudflare_tool_loop(cf: cloudflare.Cloudflare) -> None:
    workers_tool = {"name": "get_weather", "description": "The forecast", "parameters": WEATHER_PARAMETERS}
    result = as_dict(
        cf.ai.run(
            SMOLLM,
            account_id=ACCOUNT,
            messages=[{"role": "user", "content": "What is the weather in Oslo?"}],
            tools=[workers_tool],  # type: ignore[list-item]
            extra_body={"tool_choice": "required", "temperature": 0},
            max_tokens=48,
        )
    )
    (call,) = result["tool_calls"]
    assert call["name"] == "get_weather"
    assert_weather_arguments(call["arguments"])
    history = [
        {"role": "user", "content": "What is the weather in Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"name": call["name"], "arguments": call["arguments"]}],
        },
        {"role": "tool", "name": "get_weather", "content": "sunny, 21 C"},
    ]
    final = as_dict(
        cf.ai.run(SMOLLM, account_id=ACCOUNT, messages=history, tools=[workers_tool], max_tokens=24)  # type: ignore[arg-type, list-item]
    )
    assert isinstance(final["response"], str) and final["response"].strip()
    assert "tool_calls" not in final or final["tool_calls"]


def test_cloudflare_json_schema_answers_the_object(cf: cloudflare.Cloudflare) -> None:
    result = as_dict(
        cf.ai.run(
            SMOLLM,
            account_id=ACCOUNT,
            messages=[{"role": "user", "content": "Invent a person."}],
            response_format={"type": "json_schema", "json_schema": PERSON},
            temperature=0,
            max_tokens=64,
        )
    )
    assert_person(result["response"])


def test_workers_ai_streams_a_tool_call(server: Server) -> None:
    body = {
        "messages": [{"role": "user", "content": "Weather in Oslo?"}],
        "tools": TOOLS,
        "tool_choice": "required",
        "temperature": 0,
        "max_tokens": 48,
        "stream": True,
    }
    with server.client() as client, client.stream("POST", f"/ai/run/{SMOLLM}", json=body) as response:
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    calls = [call for event in events for call in event.get("tool_calls", [])]
    assert len(calls) == 1 and calls[0]["name"] == "get_weather"
    assert_weather_arguments(calls[0]["arguments"])
    assert events[-1]["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0}


def as_dict(result: object) -> dict[str, Any]:
    if hasattr(result, "model_dump"):
        result = result.model_dump()
    assert isinstance(result, dict), result
    return result


# ---- bad input: a clear 400 in each protocol's envelope ----------------------------------------------------

CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
BAD: list[tuple[str, dict[str, Any], str]] = [
    (
        "a tool whose parameters are no JSON schema",
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "frobnicate"}}}]},
        "parameters",
    ),
    (
        "a tool result for an unknown call id",
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "call_9", "content": "x"},
            ]
        },
        "call_9",
    ),
    (
        "a thinking switch on SmolLM2",
        {"chat_template_kwargs": {"enable_thinking": False}},
        "no thinking switch",
    ),
    (
        "tool_choice naming an unknown function",
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "send_email"}}},
        "send_email",
    ),
    ("tool_choice without tools", {"tool_choice": "required"}, "no 'tools'"),
    ("an unknown response_format", {"response_format": {"type": "yaml"}}, "response_format.type"),
    (
        "JSON mode with tools",
        {"tools": TOOLS, "response_format": {"type": "json_object"}},
        "cannot be combined",
    ),
]


@pytest.mark.parametrize(("why", "extra", "says"), BAD, ids=[case[0] for case in BAD])
@pytest.mark.parametrize("protocol", ["openai", "workers_ai"])
def test_bad_input(server: Server, protocol: str, why: str, extra: dict[str, Any], says: str) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **extra}
    with server.client() as client:
        if protocol == "openai":
            response = client.post("/v1/chat/completions", json={"model": SMOLLM, **body})
            message = response.json()["error"]["message"]
        else:
            response = client.post(f"/ai/run/{SMOLLM}", json=body)
            assert response.json()["success"] is False
            message = response.json()["errors"][0]["message"]
    assert response.status_code == 400, (why, response.text)
    assert says in message, (why, message)


def test_json_mode_streams_on_openai_and_is_refused_streamed_on_workers_ai(server: Server) -> None:
    body = {
        "messages": [{"role": "user", "content": "A city and its country."}],
        "response_format": {"type": "json_object"},
        "max_tokens": 24,
        "stream": True,
    }
    with server.client() as client:
        with client.stream("POST", "/v1/chat/completions", json={"model": SMOLLM, **body}) as response:
            assert response.status_code == 200
            chunks = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
        refused = client.post(f"/ai/run/{SMOLLM}", json=body)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
    assert isinstance(json.loads(text), dict)  # closed within max_tokens by the worker
    assert refused.status_code == 400 and "cannot be streamed" in refused.json()["errors"][0]["message"]


def test_an_assistant_turn_with_null_content_and_tool_calls_is_accepted(server: Server) -> None:
    messages = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    with server.client() as client:
        response = client.post(
            "/v1/chat/completions", json={"model": SMOLLM, "messages": messages, "max_tokens": 4}
        )
    assert response.status_code == 200, response.text
    assert (
        httpx.codes.is_success(response.status_code) and response.json()["choices"][0]["message"]["content"]
    )
