"""tool_choice "required" and a named tool on GLM's and Kimi's own call markup, through the real engine; and
Kimi K2.5/K2.6's thinking switch, with the family recognised from the checkpoint's template.

Each checkpoint's script answers in plain text after its reasoning; its second choice there is the family's tool
call (`FORCED_CALLS`, `write_scripted(fallback=...)`). Greedy decoding writes the answer unless something
forbids it: with tool_choice "auto" the server answers in text, with "required" or a named tool the call
grammar over the family's markers (`native_call_grammar`) masks the answer, and the call comes back.

The engine-level test runs llama.cpp's own grammar sampler on the three families' checkpoints and checks that
the markers, written in the grammar as text, are matched by the vocabulary's single special tokens.
"""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from cirrus.families import family, parse_output
from cirrus.families.native_call_grammar import native_call_grammar
from cirrus.runtime.llama import ContextShape, LlamaModel, Sampler
from cirrus.runtime.params import SamplingParams
from cirrus.testing.scripted import (
    ANSWER,
    FORCED_CALLS,
    REASONING,
    WEATHER_CALL,
    WEATHER_TOOL,
    write_scripted,
)
from tests.integration.server import Server, running_server

pytestmark = pytest.mark.integration

GLM = "@cf/test/glm-4.7-flash-forced"
KIMI = "@cf/test/kimi-k2-forced"
KIMI25 = "@cf/test/kimi-k2.6-forced"
MODELS = {GLM: "glm47", KIMI: "kimi_k2", KIMI25: "kimi_k25"}  # the family each one's GGUF template names
ARCHITECTURES = {
    "glm45": "glm4moe",
    "glm47": "deepseek2-glm",
    "kimi_k2": "deepseek2",
    "kimi_k25": "deepseek2",
}
ASK: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
CLOCK_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The time in a zone",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}},
    },
}
NAMED: Any = {"type": "function", "function": {"name": "get_weather"}}
TOOLS: list[Any] = [WEATHER_TOOL, CLOCK_TOOL]


def write_forced(directory: Path, name: str) -> Path:
    """A checkpoint of `name`'s family that answers in text, with the family's tool call as second choice."""
    answer, fallback = FORCED_CALLS[name]
    path = directory / f"{name}-forced.gguf"
    return write_scripted(
        ARCHITECTURES[name], path, template=family(name).template(), script=answer, fallback=fallback
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("native-tool-choice")
    entries = [
        f'[[models]]\nid = "{model}"\nartifact = {{ path = "{write_forced(directory, name)}" }}\n'
        "context_window = 1024\nparallel = 2\nkv_cache_tokens = 2048\n"
        for model, name in MODELS.items()
    ]
    catalog = directory / "catalog.toml"
    catalog.write_text("\n".join(entries))
    with running_server(directory, "--catalog", str(catalog)) as running:
        yield running


def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


def complete(server: Server, model: str, tool_choice: Any, **extra: Any) -> Any:
    return client(server).chat.completions.create(
        model=model,
        messages=ASK,
        tools=TOOLS,
        tool_choice=tool_choice,
        temperature=0,
        max_tokens=64,
        **extra,
    )


@pytest.mark.parametrize("model", list(MODELS))
def test_with_tool_choice_auto_the_model_answers_in_text(server: Server, model: str) -> None:
    choice = complete(server, model, "auto").choices[0]
    message: Any = choice.message
    assert (message.reasoning_content, message.content, message.tool_calls) == (REASONING, ANSWER, None)
    assert choice.finish_reason == "stop"


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("tool_choice", ["required", NAMED], ids=["required", "named"])
def test_required_or_a_named_tool_forces_the_call(server: Server, model: str, tool_choice: Any) -> None:
    choice = complete(server, model, tool_choice).choices[0]
    message: Any = choice.message
    assert choice.finish_reason == "tool_calls"
    assert message.reasoning_content == REASONING and not message.content
    (call,) = message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == WEATHER_CALL


def test_a_forced_call_streams_as_deltas(server: Server) -> None:
    stream: Any = complete(server, KIMI, "required", stream=True)
    names, arguments, content, reasons = [], [], [], []
    for chunk in stream:
        if not chunk.choices:
            continue
        delta: Any = chunk.choices[0].delta
        content.append(delta.content or "")
        for call in delta.tool_calls or []:
            names.append(call.function.name or "")
            arguments.append(call.function.arguments or "")
        reasons.append(chunk.choices[0].finish_reason)
    assert ("".join(names), json.loads("".join(arguments))) == WEATHER_CALL
    assert not "".join(content) and "tool_calls" in reasons


@pytest.mark.parametrize("model", [GLM, KIMI25])
def test_with_thinking_off_the_call_comes_without_reasoning(server: Server, model: str) -> None:
    thinking_off = {"chat_template_kwargs": {"enable_thinking": False}}
    choice = complete(server, model, "required", extra_body=thinking_off).choices[0]
    message: Any = choice.message
    assert not getattr(message, "reasoning_content", None) and not message.content
    (call,) = message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == WEATHER_CALL


def test_kimi_k26_answers_without_reasoning_when_thinking_is_off(server: Server) -> None:
    """The switch reaches the template as `thinking`: the prompt closes the block, and the answer has none."""
    thinking_off = {"chat_template_kwargs": {"enable_thinking": False}}
    message: Any = complete(server, KIMI25, "auto", extra_body=thinking_off).choices[0].message
    assert message.content == ANSWER and not getattr(message, "reasoning_content", None)


def test_workers_ai_required_gets_the_call(server: Server) -> None:
    body = {"messages": ASK, "tools": [WEATHER_TOOL], "tool_choice": "required", "max_tokens": 64}
    response = httpx.post(f"{server.url}/ai/run/{KIMI}", json={**body, "temperature": 0}, timeout=60)
    result = response.json()["result"]
    (call,) = result["tool_calls"]
    assert (call["name"], call["arguments"]) == WEATHER_CALL
    assert result["reasoning"] == REASONING


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_llama_cpps_grammar_sampler_writes_the_markers_as_special_tokens(name: str, tmp_path: Path) -> None:
    """Engine level: the call grammar forces the fallback, token for token: each marker is the vocabulary's
    special token (llama.cpp reads a special token's text against the grammar's literal)."""
    chat = family(name)
    prompt = chat.render(ASK, [WEATHER_TOOL])
    grammar = native_call_grammar(chat, [WEATHER_TOOL])
    model = LlamaModel(str(write_forced(tmp_path, name)), ContextShape(kv_cells=1024, sequences=1, threads=2))
    sampler = Sampler(SamplingParams(temperature=0.0, grammar=grammar), model.n_vocab, model.vocab)
    try:
        written = decode(model, sampler, prompt, limit=40)
        pieces = [model.piece(token).decode("utf-8") for token in written]
    finally:
        sampler.close()
        model.close()
    answer, fallback = FORCED_CALLS[name]
    assert pieces == [*answer[: answer.index(fallback.after) + 1], *fallback.script]
    output = parse_output(chat.output_parser([WEATHER_TOOL]), "".join(pieces[:-1]))
    assert [(c.name, c.arguments) for c in output.tool_calls] == [(WEATHER_CALL[0], '{"city": "Paris"}')]


def decode(model: LlamaModel, sampler: Sampler, prompt: str, limit: int) -> list[int]:
    """Sampling through the chain (grammar, then greedy) until an end-of-generation token or `limit` tokens."""
    tokens = model.tokenize(prompt, add_special=True)
    assert model.decode([(token, i, 0, i == len(tokens) - 1) for i, token in enumerate(tokens)]) == 0
    written: list[int] = []
    while len(written) < limit:
        written.append(model.sample(sampler, -1))  # llama_sampler_sample tells the grammar the token too
        if model.is_end(written[-1]):
            break
        assert model.decode([(written[-1], len(tokens) + len(written) - 1, 0, True)]) == 0
    return written
