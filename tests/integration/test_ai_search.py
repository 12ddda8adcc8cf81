"""AI Search through the real server: an instance is created (httpx and the `cloudflare` SDK), a small corpus of
Markdown, text, HTML and PDF files is uploaded and indexed in the background with all-MiniLM-L6-v2 through the
pool, paraphrased questions find the file that answers them, `chat/completions` answers with its sources (whole
and streamed), deleting a file removes its chunks, an unchanged file is not indexed again, and another account
or a token without the instance's models gets nothing."""

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudflare
import httpx
import pytest

from cirrus.sdk import Ai, AiError
from tests.integration.ai_search_calls import INSTANCES, call, search, upload, write_ai_search_catalog
from tests.integration.gateway import Identities, bearer, provision
from tests.integration.server import Server, running_server
from tests.rag_corpus import documents, write_corpus

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, minilm_gguf: Path
) -> Iterator[tuple[Identities, Server]]:
    directory = tmp_path_factory.mktemp("ai-search")
    database = str(directory / "cirrus.db")
    ids = provision(database)
    catalog = write_ai_search_catalog(directory / "catalog.toml", minilm_gguf)
    with running_server(
        directory, "--catalog", str(catalog), database=database, auth_cache_ttl_s="0"
    ) as server:
        yield ids, server


@pytest.fixture(scope="module")
def corpus(served: tuple[Identities, Server]) -> str:
    """An instance holding the whole corpus, indexed."""
    ids, server = served
    created = call(server, ids.run, "POST", INSTANCES, json={"id": "corpus", "chunk_size": 128})
    assert created.status_code == 200, created.text
    for document in documents():
        uploaded = upload(server, ids.run, "corpus", document.key, document.data)
        assert uploaded["status"] == "completed", uploaded
        assert uploaded["chunks_count"] > 0
    return "corpus"


@pytest.mark.parametrize("kind", ["vector", "keyword", "hybrid"])
def test_each_question_finds_the_file_that_answers_it(
    served: tuple[Identities, Server], corpus: str, kind: str
) -> None:
    ids, server = served
    for document in documents():
        chunks = search(server, ids.run, corpus, document.question, retrieval_type=kind, max_num_results=3)
        assert chunks, (kind, document.question)
        assert chunks[0]["item"]["key"] == document.key, (kind, document.question, chunks[0])
        assert chunks[0]["scoring_details"]  # how it was found: vector and/or keyword rank and score


def test_the_cloudflare_sdk_creates_lists_and_searches_instances(
    served: tuple[Identities, Server], corpus: str
) -> None:
    ids, server = served
    client = cloudflare.Cloudflare(api_token=ids.run, base_url=f"{server.url}/client/v4", max_retries=0)
    made = client.aisearch.instances.create(
        account_id=ids.account_a, id="sdk-made", hybrid_search_enabled=True
    )
    assert made.id == "sdk-made"
    listed = {instance.id for instance in client.aisearch.instances.list(account_id=ids.account_a)}
    assert {"sdk-made", corpus} <= listed
    found = client.aisearch.instances.search(corpus, account_id=ids.account_a, query=documents()[1].question)
    assert found.chunks[0].item is not None and found.chunks[0].item.key == documents()[1].key
    # The namespaced paths, where the account's one namespace is "default".
    chess = documents()[3]
    namespaced = client.aisearch.namespaces.instances
    uploaded = namespaced.items.upload(
        "sdk-made",
        account_id=ids.account_a,
        name="default",
        file={"file": (chess.key, chess.data), "wait_for_completion": True},
    )
    assert (uploaded.key, uploaded.status) == (chess.key, "completed")
    hits = namespaced.search("sdk-made", account_id=ids.account_a, name="default", query=chess.question)
    assert hits.chunks[0].item is not None and hits.chunks[0].item.key == chess.key


def test_chat_completions_answer_with_their_sources(served: tuple[Identities, Server], corpus: str) -> None:
    ids, server = served
    client = cloudflare.Cloudflare(api_token=ids.run, base_url=f"{server.url}/client/v4", max_retries=0)
    question = documents()[0]
    answered = client.aisearch.instances.chat_completions(
        corpus, account_id=ids.account_a, messages=[{"role": "user", "content": question.question}]
    )
    assert answered.choices[0].message.content  # SmolLM2's answer: not asserted word for word
    assert answered.chunks[0].item is not None and answered.chunks[0].item.key == question.key


def test_a_streamed_answer_sends_its_sources_first(served: tuple[Identities, Server], corpus: str) -> None:
    ids, server = served
    body = {
        "messages": [{"role": "user", "content": documents()[2].question}],
        "stream": True,
        "max_tokens": 16,
    }
    events = []
    with httpx.stream(
        "POST",
        f"{server.url}{INSTANCES}/{corpus}/chat/completions",
        json=body,
        headers=bearer(ids.run),
        timeout=120,
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[6:]))
    assert events[0]["object"] == "ai_search.chunks"
    assert events[0]["chunks"][0]["item"]["key"] == documents()[2].key
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events[1:] if e.get("choices"))
    assert text


def test_deleting_a_file_removes_its_chunks_and_an_unchanged_file_is_not_indexed_again(
    served: tuple[Identities, Server],
) -> None:
    ids, server = served
    assert call(server, ids.run, "POST", INSTANCES, json={"id": "churn"}).status_code == 200
    volcano = documents()[1]
    first = upload(server, ids.run, "churn", volcano.key, volcano.data)
    again = upload(server, ids.run, "churn", volcano.key, volcano.data)
    assert again["id"] == first["id"] and again["last_seen_at"] == first["last_seen_at"]  # not indexed again
    assert search(server, ids.run, "churn", volcano.question)[0]["item"]["key"] == volcano.key
    deleted = call(server, ids.run, "DELETE", f"{INSTANCES}/churn/items/{first['id']}")
    assert deleted.status_code == 200, deleted.text
    assert search(server, ids.run, "churn", volcano.question) == []
    job = call(server, ids.run, "GET", f"{INSTANCES}/churn/jobs/{first['job_id']}")
    assert job.status_code == 200 and job.json()["result"]["status"] == "completed"


def test_another_account_or_a_token_without_the_models_gets_nothing(
    served: tuple[Identities, Server], corpus: str
) -> None:
    ids, server = served
    for token in (ids.other, ids.narrow):  # account B; account A's token limited to @cf/google/* models
        refused = call(server, token, "POST", f"{INSTANCES}/{corpus}/search", json={"query": "bees"})
        assert refused.status_code in (403, 404), refused.text
        assert refused.json()["success"] is False
    assert corpus not in {i["id"] for i in call(server, ids.other, "GET", INSTANCES).json()["result"]}


def test_bad_uploads_and_queries_are_refused_naming_the_problem(
    served: tuple[Identities, Server], corpus: str
) -> None:
    ids, server = served
    odd = upload(server, ids.run, corpus, "notes.docx", b"PK\x03\x04")  # taken, then refused by the ingest
    assert odd["status"] == "error" and "notes.docx" in odd["error"], odd
    both = call(server, ids.run, "POST", f"{INSTANCES}/{corpus}/search", json={"query": "x", "messages": []})
    assert both.status_code == 400 and "not both" in both.text
    bad_filter = call(
        server,
        ids.run,
        "POST",
        f"{INSTANCES}/{corpus}/search",
        json={"query": "bees", "ai_search_options": {"retrieval": {"filters": {"author": "me"}}}},
    )
    assert bad_filter.status_code == 400 and "filter by filename, folder, timestamp" in bad_filter.text
    taken = call(server, ids.run, "POST", INSTANCES, json={"id": corpus})
    assert taken.status_code == 400


FOLDERED = ("readme.md", "team-a/bees.md", "team-a/deep/bees.md", "team-b/bees.md")


def test_metadata_filters_choose_the_files_searched_in_both_syntaxes(
    served: tuple[Identities, Server],
) -> None:
    """AI Search's filters (`folder` exact, a range for a folder and what is under it, `filename`, `timestamp`)
    and AutoRAG's (an `or` of folders, through the SDK as the Workers binding passes them)."""
    ids, server = served
    assert call(server, ids.run, "POST", INSTANCES, json={"id": "foldered"}).status_code == 200
    for number, key in enumerate(FOLDERED):
        text = f"# Bees {number}\n\nBees dance to tell the hive where flowers are, says {key}.\n"
        assert upload(server, ids.run, "foldered", key, text.encode())["status"] == "completed"

    def found(filters: dict[str, Any]) -> set[str]:
        chunks = search(
            server,
            ids.run,
            "foldered",
            "bees dance",
            max_num_results=10,
            retrieval_type="hybrid",
            match_threshold=0.0,
            filters=filters,
        )
        return {chunk["item"]["key"] for chunk in chunks}

    assert found({"folder": "team-a/"}) == {"team-a/bees.md"}
    assert found({"folder": {"$gte": "team-a/", "$lt": "team-a0"}}) == {
        "team-a/bees.md",
        "team-a/deep/bees.md",
    }
    assert found({"filename": {"$in": ["readme.md", "team-b/bees.md"]}}) == {"readme.md", "team-b/bees.md"}
    assert found({"timestamp": {"$gte": int(time.time()) - 3600}}) == set(FOLDERED)
    assert found({"timestamp": {"$gt": (int(time.time()) + 3600) * 1000}}) == set()  # milliseconds too
    either = {
        "type": "or",
        "filters": [{"type": "eq", "key": "folder", "value": f} for f in ("team-a/", "team-b/")],
    }
    with Ai.remote(server.url, ids.run) as ai:
        page = ai.autorag("foldered").search(
            "bees dance", max_num_results=10, score_threshold=0.0, filters=either
        )
    assert {entry["filename"] for entry in page["data"]} == {"team-a/bees.md", "team-b/bees.md"}


def test_the_cli_adds_a_folder_and_searches_it(served: tuple[Identities, Server], tmp_path: Path) -> None:
    ids, server = served
    write_corpus(tmp_path / "docs")
    cli = [sys.executable, "-m", "cirrus.cli", "rag"]
    where = ["--url", server.url, "--token", ids.run]

    def run(*arguments: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([*cli, *arguments, *where], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return done

    run("create", "from-cli", "--hybrid")
    added = run("add", "from-cli", str(tmp_path / "docs"))
    assert f"{len(documents())} of {len(documents())} files indexed" in added.stdout
    bees = documents()[2]
    assert run("search", "from-cli", bees.question).stdout.startswith(f"[1] {bees.key}")
    assert "from-cli" in run("list").stdout


def test_the_autorag_shape_and_the_cirrus_sdk_answer_like_the_workers_binding(
    served: tuple[Identities, Server], corpus: str
) -> None:
    ids, server = served
    question = documents()[1]
    with Ai.remote(server.url, ids.run) as ai:
        docs = ai.autorag(corpus)
        found = docs.search(question.question, max_num_results=2)
        assert (
            found["object"] == "vector_store.search_results.page"
            and found["search_query"] == question.question
        )
        assert len(found["data"]) <= 2 and found["data"][0]["filename"] == question.key
        assert found["data"][0]["content"][0]["text"] and found["data"][0]["file_id"]
        answered = docs.ai_search(question.question, max_tokens=16, system_prompt="Answer in one sentence.")
        assert answered["response"] and answered["data"][0]["filename"] == question.key
        events = list(docs.ai_search_stream(question.question, max_tokens=8))
        assert events[0]["object"] == "vector_store.search_results.page"
        assert events[0]["data"][0]["filename"] == question.key
        assert "".join(str(event.get("response", "")) for event in events[1:])
        assert events[-1]["usage"]["completion_tokens"] > 0
        with pytest.raises(AiError) as refused:
            ai.autorag("no-such-instance").search("anything")
        assert refused.value.status == 404
    with Ai.remote(server.url, ids.other) as other, pytest.raises(AiError):
        other.autorag(corpus).search(question.question)  # another account's instance is not found
    bad = call(
        server,
        ids.run,
        "POST",
        f"/autorag/rags/{corpus}/search",
        json={"query": "x", "filters": {"type": "eq", "key": "author", "value": "me"}},
    )
    assert bad.status_code == 400 and "author" in bad.json()["errors"][0]["message"]


def test_an_answer_is_cached_when_asked_and_a_changed_source_misses(
    served: tuple[Identities, Server],
) -> None:
    """`cf-aig-cache-ttl` caches a greedy AI Search answer as it caches any chat call; the cached answer is keyed by
    the retrieved sources too, so a document that changed does not get the old answer."""
    ids, server = served
    assert call(server, ids.run, "POST", INSTANCES, json={"id": "cached"}).status_code == 200
    upload(
        server, ids.run, "cached", "bees.md", b"# Bees\n\nBees dance to tell the hive where flowers are.\n"
    )
    body = {
        "messages": [{"role": "user", "content": "Why do bees dance?"}],
        "max_tokens": 8,
        "temperature": 0,
    }
    path = f"{INSTANCES}/cached/chat/completions"
    cached = {**bearer(ids.run), "cf-aig-cache-ttl": "600"}
    answers = [httpx.post(f"{server.url}{path}", json=body, headers=cached, timeout=120) for _ in range(2)]
    assert [a.headers["cf-aig-cache-status"] for a in answers] == ["MISS", "HIT"]
    assert answers[0].json()["choices"] == answers[1].json()["choices"]
    upload(server, ids.run, "cached", "bees.md", b"# Bees\n\nBees dance to show the hive where water is.\n")
    changed = httpx.post(f"{server.url}{path}", json=body, headers=cached, timeout=120)
    assert changed.headers["cf-aig-cache-status"] == "MISS"
    assert call(server, ids.run, "POST", path, json=body).headers["cf-aig-cache-status"] == "BYPASS"
