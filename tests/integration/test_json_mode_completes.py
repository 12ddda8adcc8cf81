"""JSON mode ends as valid JSON within max_tokens, on the real engine: first through the worker's scheduler
itself (the request marked JSON mode as the chat plan marks it), then over HTTP as a client sends it."""

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from cirrus.families.json_schema_grammar import json_object_grammar, json_schema_grammar
from cirrus.runtime.params import GenerationInput, SamplingParams
from tests.integration.conftest import SMOLLM
from tests.integration.inprocess_engine import Engine, smollm_engine
from tests.integration.server import Server

pytestmark = pytest.mark.integration

PROMPTS = [
    "Give a cat's name and color as a JSON object.",
    "What should I cook tonight? Answer with a list of ingredients.",
    "Describe the weather in Paris in spring.",
    "Tell me a joke about computers.",
]
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "hobbies": {"type": "array"}},
    "required": ["name", "age"],
}
SLOTS = 4


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    with smollm_engine(tmp_path_factory.mktemp("json-mode"), SLOTS) as running:
        yield running


def json_request(prompt: str, max_tokens: int, grammar: str, json_mode: bool = True) -> GenerationInput:
    sampling = SamplingParams(max_tokens=max_tokens, temperature=0, grammar=grammar, json_mode=json_mode)
    return GenerationInput(messages=({"role": "user", "content": prompt},), sampling=sampling)


@pytest.mark.parametrize("max_tokens", [4, 16, 48])
def test_the_worker_closes_a_json_object_within_max_tokens(engine: Engine, max_tokens: int) -> None:
    requests = {f"r{i}": json_request(p, max_tokens, json_object_grammar()) for i, p in enumerate(PROMPTS)}
    for text, finished in engine.run(requests).values():
        assert finished["type"] == "finished"
        assert int(finished["completion_tokens"]) <= max_tokens
        assert isinstance(json.loads(text), dict), text


def test_the_worker_closes_a_schema_answer_with_its_required_properties(engine: Engine) -> None:
    grammar = json_schema_grammar(PERSON)
    requests = {f"s{limit}": json_request("Invent a person.", limit, grammar) for limit in (12, 20, 40)}
    for text, finished in engine.run(requests).values():
        value = json.loads(text)
        assert {"name", "age"} <= set(value), text
        assert isinstance(value["age"], int) and int(finished["completion_tokens"]) <= 40


def test_without_json_mode_the_same_grammar_runs_unsteered(engine: Engine) -> None:
    """The steering is what closes the answer: left to itself the model's JSON is cut open."""
    requests = {f"u{i}": json_request(p, 16, json_object_grammar(), False) for i, p in enumerate(PROMPTS)}
    texts = [text for text, _ in engine.run(requests).values()]
    assert not all(_parses(text) for text in texts)


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


# ---- over HTTP: needs the chat plan to mark JSON mode (SamplingParams.json_mode) --------------------------------


def ai_run(server: Server, max_tokens: int) -> Any:
    body = {
        "messages": [{"role": "user", "content": PROMPTS[0]}],
        "response_format": {"type": "json_object"},
        "max_tokens": max_tokens,
    }
    with server.client() as client:
        response = client.post(f"/ai/run/{SMOLLM}", json=body)
    assert response.status_code == httpx.codes.OK, response.text
    return response.json()["result"]["response"]


@pytest.mark.parametrize("max_tokens", [16, 48])
def test_workers_ai_json_mode_answers_within_max_tokens(server: Server, max_tokens: int) -> None:
    answer = ai_run(server, max_tokens)
    assert isinstance(answer if not isinstance(answer, str) else json.loads(answer), dict)


@pytest.mark.parametrize("max_tokens", [16, 48])
def test_openai_json_mode_answers_within_max_tokens(server: Server, max_tokens: int) -> None:
    body = {
        "model": SMOLLM,
        "messages": [{"role": "user", "content": PROMPTS[0]}],
        "response_format": {"type": "json_object"},
        "max_tokens": max_tokens,
    }
    with server.client() as client:
        response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == httpx.codes.OK, response.text
    completion = response.json()
    assert completion["usage"]["completion_tokens"] <= max_tokens
    assert isinstance(json.loads(completion["choices"][0]["message"]["content"]), dict)
