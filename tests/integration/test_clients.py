"""Real clients against a real `cirrus serve`: the openai SDK, the cloudflare SDK, curl, Cirrus's own SDK and CLI."""

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import cloudflare
import httpx
import openai
import pytest
from cloudflare.types.ai.ai_run_params import MessagesMessage
from openai.types.chat import ChatCompletionMessageParam

from cirrus.catalog.catalog import read_catalog
from cirrus.sdk import Ai, AiError
from tests.integration.conftest import GEMMA, SMOLLM
from tests.integration.server import Server, free_port, process_exists, wait_until

ACCOUNT = "acct123"
UNKNOWN = "@cf/nobody/no-such-model"
MINILM = "@cf/sentence-transformers/all-minilm-l6-v2"  # built in; installed once `cirrus pack` stored it
CHAT: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say hello in three words."}]
CF_CHAT: list[MessagesMessage] = [{"role": "user", "content": "Say hello in three words."}]
PROMPT = {"prompt": "Say hello in three words.", "max_tokens": 8}
# A raw counting prompt at temperature 0 goes on and on: generating all of it would take far longer than the
# few seconds a cancelled stream may take to free its instance, even on a busy machine.
COUNTING = {"prompt": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,", "raw": True, "temperature": 0, "max_tokens": 2000}
CURL = shutil.which("curl")


def cli(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cirrus.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "CIRRUS_THREADS": "2"},
    )


def as_dict(result: object) -> dict[str, Any]:
    """The cloudflare SDK hands back `result` as a plain dict or, for some shapes, one of its models."""
    if hasattr(result, "model_dump"):
        result = result.model_dump()
    assert isinstance(result, dict), result
    return result


def assert_usage(usage: dict[str, Any]) -> None:
    assert usage["prompt_tokens"] > 0
    assert 0 < usage["completion_tokens"] <= 24
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


# ---- the official openai SDK ----------------------------------------------------------------------------


def openai_client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="any-key", max_retries=0, timeout=120)


@pytest.fixture
def oai(server: Server) -> Iterator[openai.OpenAI]:
    with openai_client(f"{server.url}/v1") as client:
        yield client


@pytest.mark.parametrize("prefix", ["/v1", f"/client/v4/accounts/{ACCOUNT}/ai/v1"])
def test_openai_chat_completion(server: Server, prefix: str) -> None:
    with openai_client(f"{server.url}{prefix}") as client:
        completion = client.chat.completions.create(model=SMOLLM, messages=CHAT, max_tokens=8)
    assert completion.model == SMOLLM
    assert completion.object == "chat.completion"
    choice = completion.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert completion.usage is not None
    assert completion.usage.prompt_tokens > 0
    assert 0 < completion.usage.completion_tokens <= 8
    assert (
        completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens
    )


def test_openai_chat_stream_with_usage(oai: openai.OpenAI) -> None:
    stream = oai.chat.completions.create(
        model=SMOLLM,
        messages=CHAT,
        max_tokens=12,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip()
    assert all(c.model == SMOLLM and c.object == "chat.completion.chunk" for c in chunks)
    assert len({c.id for c in chunks}) == 1
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert reasons in (["stop"], ["length"])
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert 0 < last.usage.completion_tokens <= 12
    assert last.usage.prompt_tokens > 0
    assert all(c.usage is None for c in chunks[:-1])


def test_openai_completion_on_a_base_model(oai: openai.OpenAI) -> None:
    completion = oai.completions.create(model=GEMMA, prompt="The capital of France is", max_tokens=8)
    assert completion.model == GEMMA
    assert completion.object == "text_completion"
    assert completion.choices[0].text
    assert completion.choices[0].finish_reason in ("stop", "length")
    assert completion.usage is not None
    assert completion.usage.prompt_tokens > 0
    assert 0 < completion.usage.completion_tokens <= 8


def test_openai_models_list(oai: openai.OpenAI) -> None:
    ids = [model.id for model in oai.models.list()]
    assert SMOLLM in ids
    assert GEMMA in ids
    assert oai.models.retrieve(SMOLLM).id == SMOLLM


def test_openai_unknown_model_is_not_found(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        oai.chat.completions.create(model=UNKNOWN, messages=CHAT, max_tokens=8)
    assert caught.value.status_code == 404
    assert UNKNOWN in caught.value.message
    assert caught.value.response.headers.get("cf-ai-req-id")


# ---- the official cloudflare SDK ------------------------------------------------------------------------


class Recorder:
    """Remembers the raw request targets the SDK sent, so a test can see how it encoded the model name."""

    def __init__(self) -> None:
        self.targets: list[str] = []

    def __call__(self, request: httpx.Request) -> None:
        self.targets.append(request.url.raw_path.decode())


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def cf(server: Server, recorder: Recorder) -> Iterator[cloudflare.Cloudflare]:
    http_client = httpx.Client(event_hooks={"request": [recorder]}, timeout=120)
    with cloudflare.Cloudflare(
        api_token="test", base_url=f"{server.url}/client/v4", http_client=http_client, max_retries=0
    ) as client:
        yield client


def test_cloudflare_run_prompt(cf: cloudflare.Cloudflare, recorder: Recorder) -> None:
    result = as_dict(cf.ai.run(SMOLLM, account_id=ACCOUNT, prompt="Say hello in three words.", max_tokens=8))
    assert isinstance(result["response"], str)
    assert result["response"]
    assert_usage(result["usage"])
    # The SDK percent-encodes the model name as one path segment ('/' as %2F); the server must decode it.
    assert recorder.targets == [
        f"/client/v4/accounts/{ACCOUNT}/ai/run/@cf%2Fhuggingface%2Fsmollm2-135m-instruct"
    ]


def test_cloudflare_run_messages(cf: cloudflare.Cloudflare) -> None:
    result = as_dict(cf.ai.run(SMOLLM, account_id=ACCOUNT, messages=CF_CHAT, max_tokens=8))
    assert result["response"]
    assert_usage(result["usage"])


def test_cloudflare_unknown_model_is_a_bad_request(cf: cloudflare.Cloudflare) -> None:
    with pytest.raises(cloudflare.BadRequestError) as caught:
        cf.ai.run(UNKNOWN, account_id=ACCOUNT, prompt="hi", max_tokens=8)
    body = caught.value.body
    assert isinstance(body, dict)
    assert body["success"] is False
    assert body["errors"][0]["code"] == 5007


def test_cloudflare_models_list(cf: cloudflare.Cloudflare, recorder: Recorder) -> None:
    models = [as_dict(model) for model in cf.ai.models.list(account_id=ACCOUNT, per_page=1)]
    tasks = {model["name"]: model["task"]["id"] for model in models}
    shipped = {SMOLLM: "text-generation", GEMMA: "text-generation", MINILM: "text-embeddings"}
    assert {name: tasks.get(name) for name in shipped} == shipped
    # The rest of the built-in catalog: the GLM and Kimi entries of families.toml.
    assert tasks == {spec.id: spec.task for spec in read_catalog(None)}
    properties = {p["property_id"]: p["value"] for p in models[0]["properties"]}
    assert properties["installed"] == "true"
    takes_lora = {
        m["name"]: {p["property_id"]: p["value"] for p in m["properties"]}.get("lora") for m in models
    }
    assert (takes_lora[SMOLLM], takes_lora[GEMMA]) == ("true", None)  # SmolLM2 takes fine-tunes
    # per_page=1 makes the SDK walk the pages until an empty one: the server's paging must end.
    assert len(recorder.targets) == len(models) + 1


# ---- curl -----------------------------------------------------------------------------------------------


def curl(*args: str) -> tuple[int, dict[str, str], dict[str, Any]]:
    if CURL is None:
        pytest.skip("curl is not installed here (no /usr/bin/curl on PATH)")
    completed = subprocess.run(
        [CURL, "-sS", "-i", "--max-time", "120", *args],
        capture_output=True,
        text=True,
        timeout=130,
        check=True,
    )
    head, _, body = completed.stdout.replace("\r\n", "\n").partition("\n\n")
    status_line, *header_lines = head.split("\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in header_lines)}
    return int(status_line.split()[1]), headers, json.loads(body)


@pytest.mark.parametrize(
    "path",
    [
        f"/ai/run/{SMOLLM}",
        "/ai/run/%40cf%2Fhuggingface%2Fsmollm2-135m-instruct",
        f"/client/v4/accounts/{ACCOUNT}/ai/run/{SMOLLM}",
        f"/client/v4/accounts/{ACCOUNT}/ai/run/@cf%2Fhuggingface%2Fsmollm2-135m-instruct",
    ],
    ids=["raw", "encoded", "account-raw", "account-encoded"],
)
def test_curl_run(server: Server, path: str) -> None:
    status, headers, body = curl(
        "-X", "POST", f"{server.url}{path}", "-H", "Content-Type: application/json", "-d", json.dumps(PROMPT)
    )
    assert status == 200, body
    assert headers.get("cf-ai-req-id")
    assert body["success"] is True
    assert body["errors"] == []
    assert body["result"]["response"]
    assert_usage(body["result"]["usage"])


def test_curl_unknown_model_envelope(server: Server) -> None:
    status, headers, body = curl(
        "-X",
        "POST",
        f"{server.url}/ai/run/{UNKNOWN}",
        "-H",
        "Content-Type: application/json",
        "-d",
        json.dumps(PROMPT),
    )
    assert status == 400
    assert headers.get("cf-ai-req-id")
    assert body["success"] is False
    assert body["errors"][0]["code"] == 5007


def test_curl_run_without_content_type(server: Server) -> None:
    status, _, body = curl("-X", "POST", f"{server.url}/ai/run/{SMOLLM}", "-d", json.dumps(PROMPT))
    assert status == 200, body
    assert body["success"] is True


def test_a_json_body_labelled_text_plain_is_read_as_json(server: Server) -> None:
    chat = {"model": SMOLLM, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    status, _, body = curl(
        "-X",
        "POST",
        f"{server.url}/v1/chat/completions",
        "-H",
        "content-type: text/plain",
        "-d",
        json.dumps(chat),
    )
    assert status == 200, body
    assert body["choices"][0]["message"]["role"] == "assistant"


# ---- Cirrus's SDK ---------------------------------------------------------------------------------------


def test_sdk_remote_run(server: Server) -> None:
    with Ai.remote(server.url) as ai:
        result = ai.run(SMOLLM, PROMPT)
    assert set(result) == {"response", "usage"}
    assert result["response"]
    assert_usage(result["usage"])


def test_sdk_remote_stream(server: Server) -> None:
    with Ai.remote(server.url) as ai:
        events = list(ai.stream(SMOLLM, PROMPT))
        streamed_by_run = list(ai.run(SMOLLM, {**PROMPT, "stream": True}))
    for stream in (events, streamed_by_run):
        assert "".join(e["response"] for e in stream).strip()
        assert all("usage" not in e for e in stream[:-1])
        assert stream[-1]["response"] == ""
        assert_usage(stream[-1]["usage"])


def test_sdk_remote_errors(server: Server) -> None:
    with Ai.remote(server.url) as ai:
        with pytest.raises(AiError) as unknown:
            ai.run(UNKNOWN, PROMPT)
        with pytest.raises(AiError) as unknown_streamed:
            list(ai.stream(UNKNOWN, PROMPT))
        with pytest.raises(AiError) as invalid:
            ai.run(SMOLLM, {"prompt": "hi", "max_tokens": 0})
    assert (unknown.value.code, unknown.value.status) == (5007, 400)
    assert (unknown_streamed.value.code, unknown_streamed.value.status) == (5007, 400)
    assert (invalid.value.code, invalid.value.status) == (5006, 400)
    assert "max_tokens" in invalid.value.message


def test_sdk_remote_stream_closed_early_frees_the_instance(server: Server) -> None:
    def idle() -> bool:
        return all(i["active_requests"] == 0 for i in server.instances() if i["model"] == SMOLLM)

    with Ai.remote(server.url) as ai:
        stream = ai.stream(SMOLLM, COUNTING)
        assert "response" in next(stream)
        assert not idle()
        stream.close()
        assert wait_until(idle, 10)


def test_sdk_remote_no_server() -> None:
    with Ai.remote(f"http://127.0.0.1:{free_port()}", timeout_s=5) as ai, pytest.raises(httpx.ConnectError):
        ai.run(SMOLLM, PROMPT)


def test_sdk_local_run_stream_and_close() -> None:
    # A long cancel grace: on a loaded machine the worker may confirm a cancel late; it must not be killed.
    ai = Ai.local(threads=2, worker_cancel_grace_s=60)
    try:
        result = ai.run(SMOLLM, PROMPT)
        assert result["response"]
        assert_usage(result["usage"])

        events = list(ai.stream(SMOLLM, PROMPT))
        assert "".join(e["response"] for e in events).strip()
        assert_usage(events[-1]["usage"])

        with pytest.raises(AiError) as unknown:
            ai.run(UNKNOWN, PROMPT)
        assert unknown.value.code == 5007

        # Leaving a stream early cancels its generation and frees the instance at once.
        stream = ai.stream(SMOLLM, COUNTING)
        assert next(stream)["response"]
        stream.close()
        assert wait_until(lambda: all(s.active_requests == 0 for s in ai.platform.pool.statuses()), 10)

        statuses = ai.platform.pool.statuses()
        assert [s.model for s in statuses] == [SMOLLM]
        pid = statuses[0].pid
        assert pid is not None and process_exists(pid)
    finally:
        ai.close()
    assert ai.platform.pool.statuses() == []
    assert wait_until(lambda: not process_exists(pid), timeout_s=10)
    ai.close()  # closing twice is harmless


# ---- the CLI --------------------------------------------------------------------------------------------


def test_cli_run(server: Server) -> None:
    done = cli("run", "--url", server.url, SMOLLM, "Say hello in three words.", "--max-tokens", "8")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    assert done.stderr == ""


def test_cli_run_unknown_model(server: Server) -> None:
    done = cli("run", "--url", server.url, UNKNOWN, "hi", "--max-tokens", "8")
    assert done.returncode == 1
    assert "code 5007" in done.stderr
    assert "Traceback" not in done.stderr


def test_cli_run_without_a_server() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = cli("run", "--url", url, SMOLLM, "hi", "--max-tokens", "8")
    assert done.returncode != 0
    assert f"no server at {url}" in done.stderr
    assert "Traceback" not in done.stderr


def test_cli_models() -> None:
    done = cli("models")
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines()[1:]}
    assert rows[SMOLLM].rstrip().endswith("installed")
    assert rows[GEMMA].rstrip().endswith("installed")
    assert "not installed" not in rows[SMOLLM] + rows[GEMMA]
    assert rows[MINILM].split()[1:3] == ["text-embeddings", "512"]


def test_cli_ps(server: Server) -> None:
    with Ai.remote(server.url) as ai:
        ai.run(SMOLLM, PROMPT)
    pids = {str(i["pid"]) for i in server.instances() if i["model"] == SMOLLM}
    done = cli("ps", "--url", server.url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == "NODE"
    rows = [line.split() for line in done.stdout.splitlines()[1:] if line.split()[1:2] == [SMOLLM]]
    assert rows, done.stdout
    assert any(row[0] == "local" and row[3] == "ready" and row[4] in pids for row in rows), done.stdout
    assert any(row[-2] == "in" and row[-1].endswith("s") for row in rows), done.stdout


def test_cli_ps_without_a_server() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = cli("ps", "--url", url)
    assert done.returncode == 1
    assert f"no server at {url}" in done.stderr
