"""`ai.autorag(name)`: an AI Search instance from the SDK, as the Workers binding's `env.AI.autorag(name)`.

`search(query)` returns the chunks that match, `ai_search(query)` an answer generated from them, both in the
binding's shape (OpenAI's vector-store search page: `search_query`, `data`, and `response` for ai_search), and
take the binding's `filters` (`{"type": "eq", "key": "folder", "value": "docs/"}`, or an `and` / `or` of such). They
call the server's AutoRAG routes (`/autorag/rags/{name}/search` and `.../ai-search`), so retrieval, metering and
the token's scopes are the server's. A refusal raises AiError.
"""

from collections.abc import Generator
from typing import Any
from urllib.parse import quote

import httpx

from cirrus.sdk_http import json_body, remote_error, streamed_events

Result = dict[str, Any]


def search_body(
    query: str,
    rewrite_query: bool,
    max_num_results: int | None,
    score_threshold: float | None,
    filters: Result | None,
) -> Result:
    """AutoRAG's request body, with only what the caller set."""
    body: Result = {"query": query, "rewrite_query": rewrite_query}
    if max_num_results is not None:
        body["max_num_results"] = max_num_results
    if score_threshold is not None:
        body["ranking_options"] = {"score_threshold": score_threshold}
    if filters is not None:
        body["filters"] = filters
    return body


class AiSearch:
    """One instance of the caller's account, reached over HTTP."""

    def __init__(self, client: httpx.Client, name: str) -> None:
        self._client = client
        self._path = f"/autorag/rags/{quote(name, safe='')}"

    def search(
        self,
        query: str,
        *,
        rewrite_query: bool = False,
        max_num_results: int | None = None,
        score_threshold: float | None = None,
        filters: Result | None = None,
    ) -> Result:
        """`{"search_query", "data": [{"file_id", "filename", "score", "attributes", "content"}], ...}`."""
        body = search_body(query, rewrite_query, max_num_results, score_threshold, filters)
        return self._post(f"{self._path}/search", body)

    def ai_search(
        self,
        query: str,
        *,
        model: str | None = None,
        system_prompt: str | None = None,
        max_tokens: int | None = None,
        rewrite_query: bool = False,
        max_num_results: int | None = None,
        score_threshold: float | None = None,
        filters: Result | None = None,
    ) -> Result:
        """The search page with the answer under `response`."""
        body = search_body(query, rewrite_query, max_num_results, score_threshold, filters)
        return self._post(f"{self._path}/ai-search", body | _answer(model, system_prompt, max_tokens))

    def ai_search_stream(
        self,
        query: str,
        *,
        model: str | None = None,
        system_prompt: str | None = None,
        max_tokens: int | None = None,
        rewrite_query: bool = False,
        max_num_results: int | None = None,
        score_threshold: float | None = None,
        filters: Result | None = None,
    ) -> Generator[Result, None, None]:
        """The search page first, then `{"response": "..."}` pieces, the last one with `usage`."""
        body = search_body(query, rewrite_query, max_num_results, score_threshold, filters)
        body |= _answer(model, system_prompt, max_tokens) | {"stream": True}
        return streamed_events(self._client, f"{self._path}/ai-search", body)

    def _post(self, path: str, body: Result) -> Result:
        response = self._client.post(path, json=body)
        answer = json_body(response)
        if response.status_code != 200 or not answer.get("success"):
            raise remote_error(answer, response.status_code)
        result: Result = answer["result"]
        return result


def _answer(model: str | None, system_prompt: str | None, max_tokens: int | None) -> Result:
    chosen = {"model": model, "system_prompt": system_prompt, "max_tokens": max_tokens}
    return {key: value for key, value in chosen.items() if value is not None}
