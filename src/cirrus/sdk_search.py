"""`ai.autorag(name)`: an AI Search instance from the SDK, as the Workers binding's `env.AI.autorag(name)`.

`search(query)` returns the chunks that match; `ai_search(query)` an answer generated from them, with the chunks
it was given. Both call the server's AI Search routes (`/ai-search/instances/{name}/search` and
`.../chat/completions`), so retrieval, metering and the token's scopes are the server's. A refusal raises AiError.
"""

import json
from collections.abc import Generator
from typing import Any, Literal
from urllib.parse import quote

import httpx

from cirrus.sdk_http import json_body, remote_error

Result = dict[str, Any]
RetrievalType = Literal["vector", "keyword", "hybrid"]


def retrieval_options(
    max_num_results: int | None,
    match_threshold: float | None,
    retrieval_type: RetrievalType | None,
    folder: str | None,
    rewrite_query: bool,
) -> dict[str, Any]:
    """Cloudflare's `ai_search_options`, with only what the caller set."""
    retrieval: dict[str, Any] = {}
    if max_num_results is not None:
        retrieval["max_num_results"] = max_num_results
    if match_threshold is not None:
        retrieval["match_threshold"] = match_threshold
    if retrieval_type is not None:
        retrieval["retrieval_type"] = retrieval_type
    if folder is not None:
        retrieval["filters"] = {"folder": folder}
    return {"retrieval": retrieval, "query_rewrite": {"enabled": rewrite_query}}


class AiSearch:
    """One instance of the caller's account, reached over HTTP."""

    def __init__(self, client: httpx.Client, name: str) -> None:
        self._client = client
        self._path = f"/ai-search/instances/{quote(name, safe='')}"

    def search(
        self,
        query: str,
        *,
        max_num_results: int | None = None,
        match_threshold: float | None = None,
        retrieval_type: RetrievalType | None = None,
        folder: str | None = None,
        rewrite_query: bool = False,
    ) -> Result:
        """`{"search_query", "chunks": [{"id", "text", "score", "item": {"key", ...}, ...}]}`."""
        options = retrieval_options(max_num_results, match_threshold, retrieval_type, folder, rewrite_query)
        body = {"query": query, "ai_search_options": options}
        result: Result = self._post(f"{self._path}/search", body)["result"]
        return result

    def ai_search(
        self,
        query: str,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        max_num_results: int | None = None,
        match_threshold: float | None = None,
        retrieval_type: RetrievalType | None = None,
        folder: str | None = None,
        rewrite_query: bool = False,
    ) -> Result:
        """`{"response": the answer, "chunks": its sources, "usage": ...}`."""
        options = retrieval_options(max_num_results, match_threshold, retrieval_type, folder, rewrite_query)
        body = _chat_body(query, model, max_tokens, options)
        completion = self._post(f"{self._path}/chat/completions", body)
        return {
            "response": completion["choices"][0]["message"]["content"],
            "chunks": completion.get("chunks", []),
            "usage": completion.get("usage"),
        }

    def ai_search_stream(
        self,
        query: str,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        max_num_results: int | None = None,
        match_threshold: float | None = None,
        retrieval_type: RetrievalType | None = None,
        folder: str | None = None,
        rewrite_query: bool = False,
    ) -> Generator[Result, None, None]:
        """`{"chunks": [...]}` first, then `{"response": "..."}` pieces, then one `{"usage": ...}`."""
        options = retrieval_options(max_num_results, match_threshold, retrieval_type, folder, rewrite_query)
        body = _chat_body(query, model, max_tokens, options) | {"stream": True}
        with self._client.stream("POST", f"{self._path}/chat/completions", json=body) as response:
            if response.status_code != 200:
                response.read()
                raise remote_error(json_body(response), response.status_code)
            for line in response.iter_lines():
                event = _event(line)
                if event is not None:
                    yield event

    def _post(self, path: str, body: dict[str, Any]) -> Result:
        response = self._client.post(path, json=body)
        answer = json_body(response)
        if response.status_code != 200 or answer.get("success") is False:
            raise remote_error(answer, response.status_code)
        return answer


def _chat_body(query: str, model: str | None, max_tokens: int | None, options: dict[str, Any]) -> Result:
    body: Result = {"messages": [{"role": "user", "content": query}], "ai_search_options": options}
    if model is not None:
        body["model"] = model
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body


def _event(line: str) -> Result | None:
    """One SSE line of the chat stream as the SDK's event, or None for what carries nothing for the caller."""
    if not line.startswith("data: ") or line == "data: [DONE]":
        return None
    payload = json.loads(line[len("data: ") :])
    if payload.get("object") == "ai_search.chunks":
        return {"chunks": payload["chunks"]}
    if "error" in payload:
        raise remote_error(payload, 200)
    if payload.get("usage"):
        return {"usage": payload["usage"]}
    choices = payload.get("choices") or [{}]
    text = (choices[0].get("delta") or {}).get("content")
    return {"response": text} if text else None
