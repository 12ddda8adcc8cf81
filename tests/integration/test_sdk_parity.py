"""The same bodies answer the same way through `Ai.local()` (the platform inside this process, no gateway) and
through HTTP (`Ai.remote()`, Workers AI's `/ai/run`): both go through the one chat core.

Both sides start empty and run the table in the same order, so their KV caches hold the same cells at every
step and greedy or seeded answers repeat bit for bit (docs/design-notes.md: the engine's sums depend on the
cache's layout)."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cirrus.families.registry import family
from cirrus.sdk import Ai, AiError
from cirrus.testing.scripted import write_scripted
from cirrus.testing.scripts import ANSWER, GLM47_ANSWER, REASONING
from tests.integration.conftest import GEMMA, SMOLLM
from tests.integration.minilm import MINILM
from tests.integration.server import running_server

GLM = "@cf/test/glm-4.7-flash-scripted"
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
GREEDY = {"temperature": 0, "max_tokens": 12}
TABLE: list[tuple[str, str, dict[str, Any]]] = [
    ("prompt", SMOLLM, {"prompt": "Say hello in three words.", **GREEDY}),
    (
        "messages",
        SMOLLM,
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Name a fruit."},
            ]
        }
        | GREEDY,
    ),
    ("raw", SMOLLM, {"prompt": "1, 2, 3, 4,", "raw": True, **GREEDY}),
    ("seed", SMOLLM, {"prompt": "Write a word.", "temperature": 1.2, "seed": 11, "max_tokens": 10}),
    ("keep_alive", SMOLLM, {"prompt": "Name a colour.", "keep_alive": "2m", **GREEDY}),
    (
        "tools",
        SMOLLM,
        {
            "messages": [{"role": "user", "content": "What is the weather in Oslo?"}],
            "tools": [WEATHER],
            "tool_choice": "required",
            "temperature": 0,
            "max_tokens": 40,
        },
    ),
    (
        "json",
        SMOLLM,
        {"prompt": "A city and its country, as JSON.", "response_format": {"type": "json_object"}, **GREEDY},
    ),
    (
        "stream",
        SMOLLM,
        {"messages": [{"role": "user", "content": "Count to three."}], "stream": True, **GREEDY},
    ),
    ("other model", GEMMA, {"messages": [{"role": "user", "content": "Name a planet."}], **GREEDY}),
    ("bad input", SMOLLM, {"prompt": "hi", "max_tokens": 0}),
    ("not installed", MINILM, {"text": ["a cat", "a dog"]}),  # until `cirrus pack` stores it
]


def outcome(ai: Ai, model: str, body: dict[str, Any]) -> Any:
    """The result (the streamed events, for a stream), or the error's code and status; call ids are random."""
    try:
        answer = ai.run(model, body)
        return without_call_ids(list(answer) if body.get("stream") else answer)
    except AiError as error:
        return ("error", error.code, error.status)


def without_call_ids(value: Any) -> Any:
    if isinstance(value, list):
        return [without_call_ids(item) for item in value]
    if isinstance(value, dict):
        return {k: without_call_ids(v) for k, v in value.items() if k != "id"}
    return value


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[Any], list[Any]]]:
    directory = tmp_path_factory.mktemp("parity")
    (directory / "server").mkdir()
    with running_server(directory / "server") as server, Ai.remote(server.url) as remote:
        over_http = [outcome(remote, model, body) for _, model, body in TABLE]
    with Ai.local(threads=2, state_dir=directory / "local") as local:
        in_process = [outcome(local, model, body) for _, model, body in TABLE]
    yield over_http, in_process


@pytest.mark.parametrize("index", range(len(TABLE)), ids=[name for name, _, _ in TABLE])
def test_a_body_answers_the_same_in_process_and_over_http(
    answers: tuple[list[Any], list[Any]], index: int
) -> None:
    over_http, in_process = answers
    assert in_process[index] == over_http[index]


def test_the_table_exercises_answers_errors_streams_and_tool_calls(
    answers: tuple[list[Any], list[Any]],
) -> None:
    over_http, _ = answers
    by_name = {name: answer for (name, _, _), answer in zip(TABLE, over_http, strict=True)}
    assert by_name["bad input"] == ("error", 5006, 400)
    assert by_name["prompt"]["response"] and by_name["prompt"]["usage"]["completion_tokens"] > 0
    assert by_name["tools"]["tool_calls"][0]["name"] == "get_weather"
    assert by_name["stream"][-1]["usage"]["completion_tokens"] > 0
    assert by_name["not installed"][:2] == ("error", 5007)


def test_reasoning_answers_the_same_in_process_and_over_http(tmp_path: Path) -> None:
    """A scripted GLM-4.7 checkpoint (greedy decoding writes reasoning, then the answer): the thinking switch and
    the reasoning field, whole and streamed, on both sides."""
    path = write_scripted(
        "deepseek2-glm", tmp_path / "glm47.gguf", template=family("glm47").template(), script=GLM47_ANSWER
    )
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(f'[[models]]\nid = "{GLM}"\nartifact = {{ path = "{path}" }}\ncontext_window = 512\n')
    ask = {"messages": [{"role": "user", "content": "What is the weather in Paris?"}], "temperature": 0}
    bodies: list[dict[str, Any]] = [
        {**ask, "max_tokens": 64},
        {**ask, "max_tokens": 64, "stream": True},
        {**ask, "max_tokens": 64, "chat_template_kwargs": {"enable_thinking": False}},
    ]
    (tmp_path / "server").mkdir()
    with (
        running_server(tmp_path / "server", "--catalog", str(catalog)) as server,
        Ai.remote(server.url) as remote,
    ):
        over_http = [outcome(remote, GLM, body) for body in bodies]
    with Ai.local(catalog, threads=2, state_dir=tmp_path / "local") as local:
        in_process = [outcome(local, GLM, body) for body in bodies]
    assert in_process == over_http
    whole, streamed, thinking_off = over_http
    assert (whole["reasoning"], whole["response"]) == (REASONING, ANSWER)
    assert "".join(event.get("reasoning", "") for event in streamed) == REASONING
    assert thinking_off["response"] == ANSWER and "reasoning" not in thinking_off


def test_embeddings_answer_the_same_in_process_and_over_http(tmp_path: Path, minilm_gguf: Path) -> None:
    """all-MiniLM-L6-v2 (converted from its PyPI package): vectors, shape, pooling and usage, and a bad body."""
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(
        f'[[models]]\nid = "{MINILM}"\ntask = "text-embeddings"\nartifact = {{ path = "{minilm_gguf}" }}\n'
    )
    bodies: list[dict[str, Any]] = [
        {"text": ["a cat sat on the mat", "serverless inference"]},
        {"text": "one sentence", "pooling": "cls"},
        {"text": []},
    ]
    (tmp_path / "server").mkdir()
    with (
        running_server(tmp_path / "server", "--catalog", str(catalog)) as server,
        Ai.remote(server.url) as remote,
    ):
        over_http = [outcome(remote, MINILM, body) for body in bodies]
    with Ai.local(catalog, threads=2, state_dir=tmp_path / "local") as local:
        in_process = [outcome(local, MINILM, body) for body in bodies]
    assert in_process == over_http
    pair, cls, empty = over_http
    assert pair["shape"] == [2, 384] and len(pair["data"]) == 2 and len(pair["data"][0]) == 384
    assert cls["shape"] == [1, 384]
    assert empty[0] == "error" and empty[2] == 400
