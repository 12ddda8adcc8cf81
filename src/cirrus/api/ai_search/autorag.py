"""AI Search in its AutoRAG shape: `POST .../autorag/rags/{id}/search` and `.../autorag/rags/{id}/ai-search`,
what the Workers binding's `env.AI.autorag(name).search()` and `.aiSearch()` answer with.

The result is OpenAI's vector-store search page (`object: "vector_store.search_results.page"`, `search_query`,
`data`: one entry per chunk with its file's id and name, score, attributes and text), plus the generated
`response` for ai-search. Retrieval and generation are those of the AI Search routes (search.py); only the bodies
differ. A streamed ai-search sends the page first (without `response`), then the answer as Workers AI streams a
text generation (`{"response": "..."}` events, the last with `usage`), then `[DONE]`.
"""

from collections.abc import AsyncIterator
from posixpath import dirname
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from cirrus.api.ai_search.calls import check_input, sources_refusal_named
from cirrus.api.ai_search.instances import instance_of
from cirrus.api.ai_search.search import QueryRewrite, RetrievalOptions, SearchOptions, retrieved
from cirrus.api.inference import stream_chat, whole_chat
from cirrus.api.path_parameters import ACCOUNT_PREFIX, account_parameter
from cirrus.api.sse import sse_data
from cirrus.api.workers_ai.run import workers_ai_events
from cirrus.api.workers_ai.schemas import envelope
from cirrus.chat import ChatRequest, ChatRun
from cirrus.rag.filters import ItemFilter, parse_legacy_filter
from cirrus.rag.grounding import ANSWER_INSTRUCTIONS, grounded_messages
from cirrus.rag.retrieval import Scored
from cirrus.runtime.params import SamplingParams

router = APIRouter(tags=["AI Search"])
PREFIXES = ("/autorag/rags", f"{ACCOUNT_PREFIX}/autorag/rags")
PAGE_OBJECT = "vector_store.search_results.page"
ANSWER_TEMPERATURE = 0.6


class RankingOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    score_threshold: float | None = Field(default=None, ge=0.0, le=1.0)


class AutoRagSearchBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    query: str = Field(min_length=1)
    rewrite_query: bool = False
    max_num_results: int | None = Field(default=None, ge=1, le=50)
    ranking_options: RankingOptions = Field(default_factory=RankingOptions)
    filters: dict[str, Any] | None = None  # AutoRAG's comparison or compound filter (rag/filters.py)

    def search_options(self) -> SearchOptions:
        retrieval = RetrievalOptions(
            max_num_results=self.max_num_results, match_threshold=self.ranking_options.score_threshold
        )
        return SearchOptions(retrieval=retrieval, query_rewrite=QueryRewrite(enabled=self.rewrite_query))

    def item_filter(self) -> ItemFilter | None:
        return parse_legacy_filter(self.filters, "filters") if self.filters is not None else None


class AutoRagAiSearchBody(AutoRagSearchBody):
    model: str | None = None
    system_prompt: str | None = Field(default=None, min_length=1)
    stream: bool = False
    max_tokens: int | None = Field(default=None, ge=1, description="Cirrus: the answer's length limit")


async def search(instance_id: str, body: AutoRagSearchBody, request: Request) -> Any:
    instance = await instance_of(request, instance_id)
    query, found = await retrieved(
        request, instance, body.query, None, body.search_options(), body.item_filter()
    )
    return envelope(search_page(query, found))


async def ai_search(instance_id: str, body: AutoRagAiSearchBody, request: Request) -> Any:
    instance = await instance_of(request, instance_id)
    model = body.model or instance.chat_model
    await check_input(request, model, [("query", body.query)])  # named as sent, before retrieval
    query, found = await retrieved(
        request, instance, body.query, None, body.search_options(), body.item_filter()
    )
    question = [{"role": "user", "content": body.query}]
    chat = ChatRequest(
        model=model,
        messages=grounded_messages(question, found, body.system_prompt or ANSWER_INSTRUCTIONS),
        sampling=SamplingParams(temperature=ANSWER_TEMPERATURE),
        max_tokens=body.max_tokens,
    )
    page = search_page(query, found)
    with sources_refusal_named():
        if body.stream:
            return await stream_chat(request, chat, lambda run: _streamed(run, page))
        _, result = await whole_chat(request, chat)
    return envelope({**page, "response": result.content})


def search_page(query: str, found: list[Scored]) -> dict[str, Any]:
    return {
        "object": PAGE_OBJECT,
        "search_query": query,
        "data": [_result(scored) for scored in found],
        "has_more": False,
        "next_page": None,
    }


def _result(scored: Scored) -> dict[str, Any]:
    hit = scored.hit
    folder = dirname(hit.key)
    return {
        "file_id": hit.item_id,
        "filename": hit.key,
        "score": scored.score,
        "attributes": {
            "folder": f"{folder}/" if folder else "",
            "heading": hit.heading,
            "position": hit.position,
        },
        "content": [{"id": f"{hit.item_id}:{hit.position}", "type": "text", "text": hit.text}],
    }


async def _streamed(run: ChatRun, page: dict[str, Any]) -> AsyncIterator[bytes]:
    yield sse_data(page)
    async for event in workers_ai_events(run):
        yield event


for _prefix in PREFIXES:
    _extra = account_parameter(_prefix)
    router.add_api_route(
        f"{_prefix}/{{instance_id}}/search",
        search,
        methods=["POST"],
        summary="Search an AI Search instance (AutoRAG's shape)",
        openapi_extra=_extra,
    )
    router.add_api_route(
        f"{_prefix}/{{instance_id}}/ai-search",
        ai_search,
        methods=["POST"],
        summary="Answer from an AI Search instance's documents (AutoRAG's shape)",
        openapi_extra=_extra,
    )
