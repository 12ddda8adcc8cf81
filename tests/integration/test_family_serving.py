"""GLM and Kimi served end to end through the real engine: scripted synthetic checkpoints (random weights
arranged so that greedy decoding writes a chosen text in the family's own format) come back from the real
server with reasoning and tool calls as structured fields, on both protocols, whole and streamed.

These prove the plumbing (template, special tokens, stop tokens, parsers, wire shapes), not a model's quality."""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from cirrus.families.registry import family
from cirrus.testing.scripted import write_scripted
from cirrus.testing.scripts import (
    ANSWER,
    GLM45_TOOL_CALL,
    GLM47_ANSWER,
    KIMI_K2_TOOL_CALL,
    REASONING,
    TOOL_REASONING,
    WEATHER_CALL,
    WEATHER_TOOL,
)
from tests.integration.server import Server, running_server

pytestmark = pytest.mark.integration

GLM_TOOLS = "@cf/test/glm-4.5-scripted"
GLM_ANSWER = "@cf/test/glm-4.7-flash-scripted"
KIMI_TOOLS = "@cf/test/kimi-k2-scripted"
MODELS = {
    GLM_TOOLS: ("glm4moe", "glm45", GLM45_TOOL_CALL),
    GLM_ANSWER: ("deepseek2-glm", "glm47", GLM47_ANSWER),
    KIMI_TOOLS: ("deepseek2", "kimi_k2", KIMI_K2_TOOL_CALL),
}
ASK: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS: list[Any] = [WEATHER_TOOL]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("families")
    entries = []
    for model, (arch, name, script) in MODELS.items():
        path = write_scripted(
            arch, directory / f"{arch}-{name}.gguf", template=family(name).template(), script=script
        )
        entries.append(
            f'[[models]]\nid = "{model}"\nartifact = {{ path = "{path}" }}\ncontext_window = 512\n'
            "parallel = 2\nkv_cache_tokens = 1024\n"
        )
    catalog = directory / "catalog.toml"
    catalog.write_text("\n".join(entries))
    with running_server(directory, "--catalog", str(catalog)) as running:
        yield running


def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


@pytest.mark.parametrize("model", [GLM_TOOLS, KIMI_TOOLS])
def test_a_native_tool_call_comes_back_as_tool_calls(server: Server, model: str) -> None:
    completion = client(server).chat.completions.create(
        model=model,
        messages=ASK,
        tools=TOOLS,
        temperature=0,
        max_tokens=64,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    message: Any = choice.message
    assert message.reasoning_content == TOOL_REASONING
    assert completion.usage.completion_tokens_details.reasoning_tokens == 4  # type: ignore[union-attr]
    assert not message.content
    (call,) = message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == WEATHER_CALL
    if model == KIMI_TOOLS:
        assert call.id == "functions.get_weather:0"  # Kimi's own call ids are kept


@pytest.mark.parametrize("model", [GLM_TOOLS, KIMI_TOOLS])
def test_a_streamed_tool_call_arrives_as_deltas(server: Server, model: str) -> None:
    stream: Any = client(server).chat.completions.create(
        model=model,
        messages=ASK,
        tools=TOOLS,
        temperature=0,
        max_tokens=64,
        stream=True,
    )
    reasoning, names, arguments, reasons = [], [], [], []
    for chunk in stream:
        if not chunk.choices:
            continue
        delta: Any = chunk.choices[0].delta
        reasoning.append(getattr(delta, "reasoning_content", None) or "")
        for call in delta.tool_calls or []:
            names.append(call.function.name or "")
            arguments.append(call.function.arguments or "")
        reasons.append(chunk.choices[0].finish_reason)
    assert "".join(reasoning) == TOOL_REASONING
    assert ("".join(names), json.loads("".join(arguments))) == WEATHER_CALL
    assert "tool_calls" in reasons


def test_reasoning_and_answer_come_apart_on_glm_4_7(server: Server) -> None:
    completion = client(server).chat.completions.create(
        model=GLM_ANSWER, messages=ASK, temperature=0, max_tokens=64
    )
    message: Any = completion.choices[0].message
    assert (message.reasoning_content, message.content) == (REASONING, ANSWER)
    assert completion.choices[0].finish_reason == "stop"
    details: Any = completion.usage.completion_tokens_details  # type: ignore[union-attr]
    assert (
        details.reasoning_tokens == 6
    )  # "The user asks about the weather": counted by the engine, token by token


def test_thinking_off_answers_without_reasoning(server: Server) -> None:
    completion = client(server).chat.completions.create(
        model=GLM_ANSWER,
        messages=ASK,
        temperature=0,
        max_tokens=64,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    message: Any = completion.choices[0].message
    assert message.content == ANSWER and not getattr(message, "reasoning_content", None)


def test_a_thinking_switch_on_kimi_is_a_clear_400(server: Server) -> None:
    with pytest.raises(openai.BadRequestError):
        client(server).chat.completions.create(
            model=KIMI_TOOLS,
            messages=ASK,
            max_tokens=8,
            extra_body={"chat_template_kwargs": {"enable_thinking": False}},
        )


def test_workers_ai_gets_reasoning_and_tool_calls_fields(server: Server) -> None:
    body = {"messages": ASK, "tools": [WEATHER_TOOL], "temperature": 0, "max_tokens": 64}
    result = httpx.post(f"{server.url}/ai/run/{GLM_TOOLS}", json=body, timeout=60).json()["result"]
    assert result["reasoning"] == TOOL_REASONING
    (call,) = result["tool_calls"]
    assert (call["name"], call["arguments"]) == WEATHER_CALL
    answer = httpx.post(
        f"{server.url}/ai/run/{GLM_ANSWER}", json={"messages": ASK, "temperature": 0}, timeout=60
    )
    assert (answer.json()["result"]["reasoning"], answer.json()["result"]["response"]) == (REASONING, ANSWER)


def test_the_gguf_template_names_the_family_without_a_catalog_field(server: Server, tmp_path: Path) -> None:
    """The catalog above sets no `family`: the parsers were chosen from the GGUF's own template."""
    models = client(server).models.list()
    assert {m.id for m in models.data} >= set(MODELS)
