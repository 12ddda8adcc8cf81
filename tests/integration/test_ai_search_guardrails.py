"""Guardrails apply to AI Search as to any model call: a question a deny pattern refuses (the chat model's, from
the catalog, or the account's) is refused by `search` and `chat/completions` with the status, code and message a
plain chat call gets for the same messages, before anything is retrieved; the chat model's output filters redact
an instance's answers, whole and streamed; a file the account's deny patterns refuse is not indexed, and an answer
whose retrieved sources the chat model's deny patterns refuse is refused naming the sources."""

import asyncio
import json
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from cirrus.auth.store import IdentityStore
from cirrus.db import open_database
from cirrus.guardrails import OutputFilter
from tests.integration.ai_search_calls import (
    INSTANCES,
    SMOLLM,
    SMOLLM_ARTIFACT,
    call,
    create_instance,
    upload,
    write_ai_search_catalog,
)
from tests.integration.gateway import Identities, bearer, provision
from tests.integration.server import Server, running_server, wait_until
from tests.rag_corpus import documents

pytestmark = pytest.mark.integration

GUARDED = "@cf/cirrus/smollm2-guarded"
GUARDED_ENTRY = f"""
[[models]]
id = "{GUARDED}"
{SMOLLM_ARTIFACT}
context_window = 4096
deny_patterns = ["forbidden\\\\s+fruit"]
output_filters = ["email", "phone", "card"]
output_deny_patterns = ["[Tt]he"]
"""
ACCOUNT_DENY = r"secret\s+recipe"
SOURDOUGH = documents()[0]
ANSWER = {"max_tokens": 40, "temperature": 0}


@dataclass(frozen=True)
class Guarded:
    ids: Identities
    server: Server
    database: str


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, minilm_gguf: Path) -> Iterator[Guarded]:
    """Instance `plain` answers with SmolLM2, `guarded` with the same weights behind the catalog's guardrails;
    account A refuses `secret recipe`. Both hold the sourdough file."""
    directory = tmp_path_factory.mktemp("ai-search-guardrails")
    database = str(directory / "cirrus.db")
    ids = provision(database)
    asyncio.run(_deny_for_account(database, ids.account_a, ACCOUNT_DENY))
    catalog = write_ai_search_catalog(directory / "catalog.toml", minilm_gguf, GUARDED_ENTRY)
    with running_server(
        directory, "--catalog", str(catalog), database=database, auth_cache_ttl_s="0"
    ) as server:
        for instance, model in (("plain", SMOLLM), ("guarded", GUARDED)):
            create_instance(server, ids.run, instance, ai_search_model=model)
            indexed = upload(server, ids.run, instance, SOURDOUGH.key, SOURDOUGH.data)
            assert indexed["status"] == "completed", indexed
        yield Guarded(ids, server, database)


async def _deny_for_account(database: str, account_id: str, pattern: str) -> None:
    db = await open_database(database)
    try:
        await IdentityStore(db).set_deny_patterns(account_id, [pattern])
    finally:
        await db.close()


def conversation(question: str) -> list[dict[str, str]]:
    """Two turns, so a refusal's field index shows whose numbering it uses."""
    return [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hello! What would you like to know?"},
        {"role": "user", "content": question},
    ]


DENIED = [
    pytest.param("guarded", GUARDED, "Tell me about the Forbidden   Fruit.", id="the chat model's pattern"),
    pytest.param("plain", SMOLLM, "What is in the secret recipe?", id="the account's pattern"),
]


@pytest.mark.parametrize("instance, model, question", DENIED)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_denied_question_is_refused_as_a_plain_chat_call_refuses_it(
    guarded: Guarded, instance: str, model: str, question: str, stream: bool
) -> None:
    ids, server = guarded.ids, guarded.server
    body = {"messages": conversation(question), "stream": stream, **ANSWER}
    plain = call(server, ids.run, "POST", f"/ai/run/{model}", json=body)
    assert plain.status_code == 400, plain.text
    assert plain.json()["errors"][0]["code"] == 3054
    answered = call(server, ids.run, "POST", f"{INSTANCES}/{instance}/chat/completions", json=body)
    assert answered.status_code == plain.status_code, answered.text
    assert (
        answered.json()["errors"] == plain.json()["errors"]
    )  # the same code and message, naming messages[2]


def test_a_search_for_a_denied_question_is_refused_naming_the_field_sent(guarded: Guarded) -> None:
    """The search routes and AutoRAG's ai-search, for the account's pattern and the chat model's."""
    ids, server = guarded.ids, guarded.server
    path = f"{INSTANCES}/plain/search"
    by_query = call(server, ids.run, "POST", path, json={"query": "the secret recipe"})
    by_messages = call(server, ids.run, "POST", path, json={"messages": conversation("the Secret Recipe")})
    autorag = call(
        server, ids.run, "POST", "/autorag/rags/guarded/ai-search", json={"query": "forbidden fruit"}
    )
    cases = ((by_query, "'query'"), (by_messages, "'messages[2].content'"), (autorag, "'query'"))
    for refused, field in cases:
        assert refused.status_code == 400, refused.text
        error = refused.json()["errors"][0]
        assert error["code"] == 3054 and field in error["message"], error
        assert not re.search("secret|forbidden", error["message"], re.IGNORECASE), error
    ids_sent = [refused.headers["x-request-id"] for refused, _ in cases]

    def metered() -> list[tuple[str, int, int]]:
        with sqlite3.connect(guarded.database) as db:
            marks = ", ".join("?" * len(ids_sent))
            return db.execute(
                "SELECT request_id, status, error_code FROM usage_events"
                f" WHERE request_id IN ({marks}) ORDER BY started_at",
                ids_sent,
            ).fetchall()

    assert wait_until(lambda: len(metered()) == len(cases), 30.0), metered()  # the meter writes in batches
    assert metered() == [(request_id, 400, 3054) for request_id in ids_sent]  # refused, as a plain call is


def test_the_chat_models_output_filters_redact_an_answer_whole_and_streamed(guarded: Guarded) -> None:
    ids, server = guarded.ids, guarded.server
    body = {"messages": [{"role": "user", "content": SOURDOUGH.question}], **ANSWER}
    unfiltered = answer_text(call(server, ids.run, "POST", f"{INSTANCES}/plain/chat/completions", json=body))
    assert "[redacted]" in OutputFilter((), ("[Tt]he",)).apply(unfiltered), (
        unfiltered
    )  # there is a "the" to hide
    whole = answer_text(call(server, ids.run, "POST", f"{INSTANCES}/guarded/chat/completions", json=body))
    streamed = streamed_text(server, ids.run, "guarded", body)
    for answer in (whole, streamed):
        assert "[redacted]" in answer and re.search("[Tt]he", answer) is None, answer


def test_a_file_the_accounts_deny_patterns_refuse_is_not_indexed(guarded: Guarded) -> None:
    ids, server = guarded.ids, guarded.server
    data = b"# Family cooking\n\nGrandmother kept her secret recipe for plum cake in a locked tin box.\n"
    refused = upload(server, ids.run, "plain", "family/cake.md", data)
    assert refused["status"] == "error" and "guardrail" in refused["error"], refused
    assert "secret" not in refused["error"].lower()


def test_sources_the_chat_models_deny_patterns_refuse_are_named_as_the_sources(guarded: Guarded) -> None:
    ids, server = guarded.ids, guarded.server
    create_instance(server, ids.run, "eden", ai_search_model=GUARDED)
    data = b"# Eden\n\nIn the garden story the forbidden fruit grew on the tree of knowledge.\n"
    assert (
        upload(server, ids.run, "eden", "myths/eden.md", data)["status"] == "completed"
    )  # MiniLM has no patterns
    body = {"messages": [{"role": "user", "content": "What grew on the tree of knowledge?"}], **ANSWER}
    refused = call(server, ids.run, "POST", f"{INSTANCES}/eden/chat/completions", json=body)
    assert refused.status_code == 400, refused.text
    error = refused.json()["errors"][0]
    assert error["code"] == 3054 and "sources" in error["message"] and "messages[" not in error["message"], (
        error
    )


def answer_text(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    content: str = response.json()["choices"][0]["message"]["content"]
    return content


def streamed_text(server: Server, token: str, instance: str, body: dict[str, Any]) -> str:
    events = []
    with httpx.stream(
        "POST",
        f"{server.url}{INSTANCES}/{instance}/chat/completions",
        json={**body, "stream": True},
        headers=bearer(token),
        timeout=120,
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[6:]))
    return "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e.get("choices"))
