"""OpenAI's Batch API through the official `openai` SDK, unmodified, against the real server on a gateway with
real tokens: an uploaded JSONL file becomes a batch whose output file answers every request in order with the
route's own body; failures land in the error file; batches list newest first; a cancelled batch never runs its
remaining requests; another account sees neither file nor batch; bad input files are refused naming the line;
embeddings batches answer what the embeddings route answers."""

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import openai
import pytest
from openai.types import Batch

from tests.integration.conftest import SMOLLM, Gateway
from tests.integration.gateway import GUARDED, bearer
from tests.integration.minilm import MINILM
from tests.integration.server import Server, running_server, wait_until, write_catalog

pytestmark = pytest.mark.integration

CHAT: Final = "/v1/chat/completions"
FINISHED = ("completed", "expired", "cancelled", "failed")
LONG = "Count from 1 to 300, separated by commas."


def client(url: str, token: str, prefix: str = "/v1") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}{prefix}", api_key=token, max_retries=0, timeout=120)


def chat_line(custom_id: str, content: str, model: str = SMOLLM, max_tokens: int = 8) -> dict[str, Any]:
    body = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens}
    return {"custom_id": custom_id, "method": "POST", "url": CHAT, "body": {**body, "temperature": 0}}


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def submit(api: openai.OpenAI, lines: list[dict[str, Any]], endpoint: Any = CHAT) -> Batch:
    uploaded = api.files.create(file=("requests.jsonl", jsonl(lines)), purpose="batch")
    return api.batches.create(input_file_id=uploaded.id, endpoint=endpoint, completion_window="24h")


def finished(api: openai.OpenAI, batch_id: str, timeout_s: float = 240.0) -> Batch:
    assert wait_until(lambda: api.batches.retrieve(batch_id).status in FINISHED, timeout_s)
    return api.batches.retrieve(batch_id)


def lines_of(api: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    assert file_id is not None
    return [json.loads(line) for line in api.files.content(file_id).text.splitlines()]


def test_a_batch_answers_every_request_in_order_with_the_routes_own_body(gateway_sqlite: Gateway) -> None:
    api = client(gateway_sqlite.server.url, gateway_sqlite.ids.run)
    content = jsonl([chat_line(f"c-{n}", f"Name a colour, number {n}.") for n in range(3)])
    uploaded = api.files.create(file=("colours.jsonl", content), purpose="batch")
    assert (uploaded.object, uploaded.purpose, uploaded.status) == ("file", "batch", "processed")
    assert (uploaded.bytes, uploaded.filename) == (len(content), "colours.jsonl")
    assert api.files.content(uploaded.id).content == content
    batch = api.batches.create(
        input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h", metadata={"job": "colours"}
    )
    assert (
        batch.id.startswith("batch_") and batch.status == "in_progress" and batch.input_file_id == uploaded.id
    )
    assert batch.request_counts is not None and batch.request_counts.total == 3
    done = finished(api, batch.id)
    assert (done.status, done.error_file_id, done.metadata) == ("completed", None, {"job": "colours"})
    assert done.request_counts is not None and (
        done.request_counts.completed,
        done.request_counts.failed,
    ) == (3, 0)
    assert done.completed_at is not None and done.completed_at >= done.created_at
    output = lines_of(api, done.output_file_id)
    assert [(line["custom_id"], line["error"]) for line in output] == [(f"c-{n}", None) for n in range(3)]
    assert [line["response"]["request_id"] for line in output] == [f"{batch.id}/{n}" for n in range(3)]
    assert len({line["id"] for line in output}) == 3
    direct = httpx.post(
        f"{gateway_sqlite.server.url}{CHAT}",
        json=chat_line("x", "Name a colour.")["body"],
        headers=bearer(gateway_sqlite.ids.run),
        timeout=120,
    ).json()
    for line in output:
        body = line["response"]["body"]
        assert line["response"]["status_code"] == 200 and body.keys() == direct.keys()
        assert (body["object"], body["model"]) == ("chat.completion", SMOLLM)
        assert body["choices"][0].keys() == direct["choices"][0].keys()
        assert body["choices"][0]["message"]["role"] == "assistant"
        assert body["usage"].keys() == direct["usage"].keys() and 0 < body["usage"]["completion_tokens"] <= 8
    assert done.output_file_id is not None
    output_file = api.files.retrieve(done.output_file_id)
    assert (output_file.purpose, output_file.bytes) == (
        "batch_output",
        len(api.files.content(done.output_file_id).content),
    )
    listed = {file.id for file in api.files.list()}
    assert {uploaded.id, done.output_file_id} <= listed
    assert api.files.delete(done.output_file_id).deleted
    with pytest.raises(openai.NotFoundError):
        api.files.content(done.output_file_id)
    assert api.batches.retrieve(batch.id).output_file_id == done.output_file_id  # as OpenAI keeps it


def test_requests_that_fail_at_run_time_land_in_the_error_file(gateway_sqlite: Gateway) -> None:
    api = client(gateway_sqlite.server.url, gateway_sqlite.ids.run)
    batch = submit(
        api,
        [
            chat_line("ok-1", "Say hi."),
            chat_line("refused", "Tell me about the forbidden fruit.", model=GUARDED),
            chat_line("ok-2", "Say bye."),
        ],
    )
    done = finished(api, batch.id)
    assert done.status == "completed"
    assert done.request_counts is not None and (
        done.request_counts.completed,
        done.request_counts.failed,
    ) == (2, 1)
    assert [line["custom_id"] for line in lines_of(api, done.output_file_id)] == ["ok-1", "ok-2"]
    [error] = lines_of(api, done.error_file_id)
    assert (error["custom_id"], error["response"]["status_code"], error["response"]["request_id"]) == (
        "refused",
        400,
        f"{batch.id}/1",
    )
    assert error["response"]["body"]["error"]["code"] == "content_filter"


def test_batches_list_newest_first_across_endpoints_without_workers_ai_batches(
    gateway_sqlite: Gateway,
) -> None:
    url, token = gateway_sqlite.server.url, gateway_sqlite.ids.run
    api = client(url, token)
    chat = submit(api, [chat_line("a", "Say hi.", max_tokens=4)])
    completion_line = {
        "custom_id": "p",
        "method": "POST",
        "url": "/v1/completions",
        "body": {"model": SMOLLM, "prompt": "1, 2, 3,", "max_tokens": 4, "echo": True},
    }
    completion = submit(api, [completion_line], endpoint="/v1/completions")
    queued = httpx.post(
        f"{url}/ai/run/{SMOLLM}?queueRequest=true",
        json={"requests": [{"prompt": "Hi", "max_tokens": 2}]},
        headers=bearer(token),
        timeout=30,
    )
    workers_ai_batch = queued.json()["result"]["request_id"]
    ids = [batch.id for batch in api.batches.list(limit=1)]  # one a page: the SDK follows `after`
    assert ids.index(completion.id) < ids.index(chat.id) and workers_ai_batch not in ids
    first = api.batches.list(limit=1)
    assert first.has_more and [b.id for b in first.data] == [ids[0]]
    [text] = lines_of(api, finished(api, completion.id).output_file_id)
    body = text["response"]["body"]
    assert body["object"] == "text_completion" and body["choices"][0]["text"].startswith("1, 2, 3,")
    scoped = client(url, token, f"/client/v4/accounts/{gateway_sqlite.ids.account_a}/ai/v1")
    assert scoped.batches.retrieve(chat.id).id == chat.id
    with pytest.raises(openai.NotFoundError):
        api.batches.retrieve(workers_ai_batch)


def test_a_cancelled_batch_never_runs_its_remaining_requests(gateway_sqlite: Gateway) -> None:
    api = client(gateway_sqlite.server.url, gateway_sqlite.ids.run)
    batch = submit(api, [chat_line(f"long-{n}", LONG, max_tokens=96) for n in range(8)])
    cancelling = api.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled") and cancelling.cancelling_at is not None
    done = finished(api, batch.id)
    assert done.status == "cancelled" and done.cancelled_at is not None
    errors = lines_of(api, done.error_file_id)
    never_ran = [
        line["custom_id"] for line in errors if (line["error"] or {}).get("code") == "batch_cancelled"
    ]
    assert len(never_ran) >= 4  # at most four ran at once (the batch concurrency)
    with sqlite3.connect(Path(gateway_sqlite.database_url)) as db:
        attempts = dict(
            db.execute(
                "SELECT position, attempts FROM batch_items WHERE batch_id = ?", (batch.id,)
            ).fetchall()
        )
    assert all(attempts[int(custom_id.removeprefix("long-"))] == 0 for custom_id in never_ran)
    ran = done.request_counts
    assert ran is not None and ran.completed + ran.failed + len(never_ran) == 8


def test_another_account_sees_neither_the_file_nor_the_batch(gateway_sqlite: Gateway) -> None:
    url, ids = gateway_sqlite.server.url, gateway_sqlite.ids
    owner, other = client(url, ids.run), client(url, ids.other)
    batch = submit(owner, [chat_line("mine", "Say hi.", max_tokens=2)])
    for attempt in (
        lambda: other.files.retrieve(batch.input_file_id),
        lambda: other.files.content(batch.input_file_id),
        lambda: other.files.delete(batch.input_file_id),
        lambda: other.batches.retrieve(batch.id),
        lambda: other.batches.cancel(batch.id),
        lambda: other.batches.create(
            input_file_id=batch.input_file_id, endpoint=CHAT, completion_window="24h"
        ),
    ):
        with pytest.raises(openai.NotFoundError):
            attempt()
    assert batch.input_file_id not in {file.id for file in other.files.list()}
    assert batch.id not in {listed.id for listed in other.batches.list()}
    with pytest.raises(openai.PermissionDeniedError):
        client(url, ids.usage_only).files.create(file=("x.jsonl", b"{}\n"), purpose="batch")
    assert finished(owner, batch.id).status == "completed"
    assert owner.files.delete(batch.input_file_id).deleted
    with pytest.raises(openai.NotFoundError):
        owner.files.retrieve(batch.input_file_id)


def test_bad_input_files_are_refused_naming_the_line_before_anything_is_queued(
    gateway_sqlite: Gateway,
) -> None:
    api = client(gateway_sqlite.server.url, gateway_sqlite.ids.run)
    good = json.dumps(chat_line("good", "Hi")) + "\n"
    streaming = chat_line("streams", "Hi")
    streaming["body"]["stream"] = True
    before = [batch.id for batch in api.batches.list(limit=100)]
    for content, where, field in (
        (good + '{"custom_id": "broken",\n', "line 2", "JSON"),
        (good + json.dumps(chat_line("other", "Hi")) + "\n" + good, "line 3", "custom_id"),
        (json.dumps({**chat_line("wrong", "Hi"), "url": "/v1/embeddings"}) + "\n", "line 1", "url"),
        (good + json.dumps(streaming) + "\n", "line 2", "stream"),
    ):
        uploaded = api.files.create(file=("bad.jsonl", content.encode()), purpose="batch")
        with pytest.raises(openai.BadRequestError) as refused:
            api.batches.create(input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h")
        assert where in str(refused.value) and field in str(refused.value), str(refused.value)
    assert [batch.id for batch in api.batches.list(limit=100)] == before
    with pytest.raises(openai.BadRequestError, match="purpose"):
        api.files.create(file=("x.jsonl", good.encode()), purpose="fine-tune")


@pytest.fixture(scope="module")
def embeddings_server(tmp_path_factory: pytest.TempPathFactory, minilm_gguf: Path) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("batch-embeddings")
    catalog = write_catalog(
        directory / "catalog.toml",
        f"""
[[models]]
id = "{MINILM}"
task = "text-embeddings"
artifact = {{ path = "{minilm_gguf}" }}
""",
    )
    with running_server(directory, "--catalog", str(catalog), spare_workers="0") as server:
        yield server


def test_an_embeddings_batch_answers_what_the_embeddings_route_answers(embeddings_server: Server) -> None:
    api = client(embeddings_server.url, "unused")
    texts = [["The cat sat on the mat."], ["hello", "Serverless inference."]]
    lines = [
        {
            "custom_id": f"e-{n}",
            "method": "POST",
            "url": "/v1/embeddings",
            "body": {"model": MINILM, "input": t},
        }
        for n, t in enumerate(texts)
    ]
    done = finished(api, submit(api, lines, endpoint="/v1/embeddings").id)
    assert done.status == "completed"
    for line, text in zip(lines_of(api, done.output_file_id), texts, strict=True):
        body = line["response"]["body"]
        direct = httpx.post(
            f"{embeddings_server.url}/v1/embeddings", json={"model": MINILM, "input": text}, timeout=60
        )
        expected = direct.json()
        assert body.keys() == expected.keys() and body["usage"] == expected["usage"]
        for got, want in zip(body["data"], expected["data"], strict=True):
            assert got["index"] == want["index"]
            assert got["embedding"] == pytest.approx(want["embedding"], abs=1e-4)
