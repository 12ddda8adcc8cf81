"""Anthropic's `messages.count_tokens` through the official `anthropic` SDK against the real server: the count is
the prompt a message with the same body reports (`input_tokens` plus `cache_read_input_tokens`), tools and the
thinking switch count as the model's template renders them, and errors come in Anthropic's envelope."""

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from cirrus.families.registry import family
from cirrus.testing.scripted import write_scripted
from cirrus.testing.scripts import GLM47_ANSWER
from tests.integration.conftest import SMOLLM, Gateway
from tests.integration.server import Server, running_server

pytestmark = pytest.mark.integration

ASK: Any = [{"role": "user", "content": "What is the weather in Oslo?"}]
SYSTEM = "You answer in one short sentence."
WEATHER: Any = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
GREEDY = {"temperature": 0}
GLM = "@cf/test/glm-4.7-flash-scripted"


def client(url: str, api_key: str = "unused") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=api_key, max_retries=0, timeout=120)


def reported_prompt(api: anthropic.Anthropic, **body: Any) -> int:
    """The prompt tokens a message with this body reports, however much of it the prefix cache held."""
    usage = api.messages.create(max_tokens=2, extra_body=GREEDY, **body).usage
    prompt: int = usage.input_tokens + (usage.cache_read_input_tokens or 0)
    return prompt


def test_a_count_is_the_prompt_a_message_with_the_same_body_reports(server: Server) -> None:
    api = client(server.url)
    conversation: Any = [
        *ASK,
        {"role": "assistant", "content": "It is sunny."},
        {"role": "user", "content": [{"type": "text", "text": "And tomorrow?"}]},
    ]
    for body in (
        {"model": SMOLLM, "messages": ASK},
        {"model": SMOLLM, "messages": conversation, "system": SYSTEM},
    ):
        counted = api.messages.count_tokens(**body).input_tokens
        assert counted > 5 and counted == reported_prompt(api, **body)


def test_tools_count_as_the_prompt_renders_them(server: Server) -> None:
    api = client(server.url)
    plain = api.messages.count_tokens(model=SMOLLM, messages=ASK).input_tokens
    with_tools = api.messages.count_tokens(
        model=SMOLLM, messages=ASK, tools=[WEATHER], tool_choice={"type": "auto"}
    ).input_tokens
    assert with_tools > plain
    asked = {"model": SMOLLM, "messages": ASK, "tools": [WEATHER], "tool_choice": {"type": "auto"}}
    assert with_tools == reported_prompt(api, **asked)


def test_bad_counts_answer_in_anthropics_error_envelope(server: Server) -> None:
    url = f"{server.url}/v1/messages/count_tokens"
    missing = httpx.post(url, json={"model": SMOLLM}, timeout=30)
    assert missing.status_code == 400
    body = missing.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "messages" in body["error"]["message"]
    api = client(server.url)
    with pytest.raises(anthropic.NotFoundError) as unknown:
        api.messages.count_tokens(model="@cf/nobody/nothing", messages=ASK)
    assert unknown.value.status_code == 404
    image: Any = [{"role": "user", "content": [{"type": "image", "source": {}}]}]
    with pytest.raises(anthropic.BadRequestError) as refused:
        api.messages.count_tokens(model=SMOLLM, messages=image)
    assert "content" in str(refused.value)
    with pytest.raises(anthropic.BadRequestError) as no_switch:
        api.messages.count_tokens(
            model=SMOLLM, messages=ASK, thinking={"type": "enabled", "budget_tokens": 1024}
        )
    assert "thinking" in str(no_switch.value)


def test_the_gateway_counts_for_a_token_that_may_run_the_model_only(gateway_sqlite: Gateway) -> None:
    url, ids = gateway_sqlite.server.url, gateway_sqlite.ids
    assert client(url, api_key=ids.run).messages.count_tokens(model=SMOLLM, messages=ASK).input_tokens > 5
    for token in (ids.narrow, ids.usage_only):
        with pytest.raises(anthropic.PermissionDeniedError) as refused:
            client(url, api_key=token).messages.count_tokens(model=SMOLLM, messages=ASK)
        assert refused.value.body["type"] == "error"  # type: ignore[index]
    with pytest.raises(anthropic.AuthenticationError):
        client(url, api_key="not-a-token").messages.count_tokens(model=SMOLLM, messages=ASK)


@pytest.fixture(scope="module")
def glm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A scripted GLM-4.7 checkpoint: a family with a thinking switch and native tools in its template."""
    directory = tmp_path_factory.mktemp("count-glm")
    path = write_scripted(
        "deepseek2-glm", directory / "glm47.gguf", template=family("glm47").template(), script=GLM47_ANSWER
    )
    catalog = directory / "catalog.toml"
    catalog.write_text(f'[[models]]\nid = "{GLM}"\nartifact = {{ path = "{path}" }}\ncontext_window = 512\n')
    with running_server(directory, "--catalog", str(catalog)) as running:
        yield running


def test_a_family_counts_its_thinking_switch_and_tools_as_a_message_reports_them(glm: Server) -> None:
    """GLM-4.7's switch ends the prompt with `<think>` or `</think>`: one token either way, so the count is
    checked against the message, not between the two."""
    api = client(glm.url)
    for thinking in ({"type": "enabled", "budget_tokens": 1024}, {"type": "disabled"}):
        body = {"model": GLM, "messages": ASK, "thinking": thinking}
        assert api.messages.count_tokens(**body).input_tokens == reported_prompt(api, **body)
    tools = {"model": GLM, "messages": ASK, "tools": [WEATHER]}
    with_tools = api.messages.count_tokens(**tools).input_tokens
    assert with_tools > api.messages.count_tokens(model=GLM, messages=ASK).input_tokens
    assert with_tools == reported_prompt(api, **tools)
