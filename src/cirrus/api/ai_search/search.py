"""Asking an instance: `POST .../instances/{id}/search` (the chunks that match `query` or the last user message
of `messages`) and `POST .../instances/{id}/chat/completions` (an answer generated from those chunks, in OpenAI's
chat completion shape, whole or streamed, with the chunks it was given under `chunks`). `ai_search_options` as
Cloudflare's: `retrieval` (`max_num_results`, `match_threshold`, `retrieval_type` vector / keyword / hybrid,
`filters` on `filename`, `folder` and `timestamp` as rag/filters.py reads them) and `query_rewrite.enabled` (the
chat model rewrites the question first)."""

from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from cirrus.api.ai_search.calls import check_input, embed_query, sources_refusal_named, step_call
from cirrus.api.ai_search.instances import PREFIXES, instance_of, rag_store
from cirrus.api.ai_search.shapes import chunk_object
from cirrus.api.context import platform_of
from cirrus.api.inference import GatewayChatEngine, stream_chat, whole_chat
from cirrus.api.openai.chat import chat_completion_body, chat_stream
from cirrus.api.path_parameters import account_parameter
from cirrus.api.sse import sse_data
from cirrus.api.workers_ai.schemas import envelope
from cirrus.chat import ChatRequest, ChatRun, start_chat
from cirrus.rag.filters import ItemFilter, allowed_items, parse_filters
from cirrus.rag.grounding import asked, grounded_messages, message_fields, rewrite_messages, rewritten_query
from cirrus.rag.index import ChunkIndex, ItemScope
from cirrus.rag.model import Instance
from cirrus.rag.retrieval import Retrieval, RetrievalType, Scored, retrieve
from cirrus.runtime.params import SamplingParams

router = APIRouter(tags=["AI Search"])
REWRITE_MAX_TOKENS = 32
FILTERS_PARAM = "ai_search_options.retrieval.filters"


class RetrievalOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    max_num_results: int | None = Field(default=None, ge=1, le=50)
    match_threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    retrieval_type: Literal["vector", "keyword", "hybrid"] | None = None
    filters: dict[str, Any] | None = None

    def item_filter(self) -> ItemFilter | None:
        return parse_filters(self.filters, FILTERS_PARAM) if self.filters else None


class QueryRewrite(BaseModel):
    model_config = ConfigDict(extra="ignore")

    enabled: bool = False


class SearchOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    retrieval: RetrievalOptions = Field(default_factory=RetrievalOptions)
    query_rewrite: QueryRewrite = Field(default_factory=QueryRewrite)


class SearchBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    query: str | None = None
    messages: list[dict[str, Any]] | None = None
    ai_search_options: SearchOptions = Field(default_factory=SearchOptions)


class ChatBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    messages: list[dict[str, Any]] = Field(min_length=1)
    model: str | None = None
    stream: bool = False
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=5.0)
    ai_search_options: SearchOptions = Field(default_factory=SearchOptions)


async def search(instance_id: str, body: SearchBody, request: Request) -> Any:
    instance = await instance_of(request, instance_id)
    query, found = await retrieved(request, instance, body.query, body.messages, body.ai_search_options)
    return envelope(
        {"search_query": query, "query_kind": "text", "chunks": [chunk_object(scored) for scored in found]}
    )


async def chat_completions(instance_id: str, body: ChatBody, request: Request) -> Any:
    instance = await instance_of(request, instance_id)
    model = body.model or instance.chat_model
    # The client's messages through the guardrails as a plain chat call's, before anything is retrieved.
    await check_input(request, model, message_fields(body.messages))
    _, found = await retrieved(request, instance, None, body.messages, body.ai_search_options)
    chat = ChatRequest(
        model=model,
        messages=grounded_messages(body.messages, found),
        sampling=SamplingParams(temperature=0.6 if body.temperature is None else body.temperature),
        max_tokens=body.max_tokens,
    )
    chunks = [chunk_object(scored) for scored in found]
    with sources_refusal_named():
        if body.stream:
            return await stream_chat(request, chat, lambda run: _streamed(run, chunks))
        run, result = await whole_chat(request, chat)
    return chat_completion_body(run.model, result) | {"chunks": chunks}


async def _streamed(run: ChatRun, chunks: list[dict[str, Any]]) -> AsyncIterator[bytes]:
    """The sources first (an event of their own, which OpenAI's clients skip), then the answer as OpenAI streams."""
    yield sse_data({"object": "ai_search.chunks", "chunks": chunks})
    async for event in chat_stream(run, usage=True):
        yield event


async def retrieved(
    request: Request,
    instance: Instance,
    query: str | None,
    messages: list[dict[str, Any]] | None,
    options: SearchOptions,
    legacy_filter: ItemFilter | None = None,
) -> tuple[str, list[Scored]]:
    """The question asked and the chunks found for it, of the items the filter lets through: AutoRAG's
    `legacy_filter` where given, else `options`' own."""
    item_filter = legacy_filter or options.retrieval.item_filter()
    where, question = asked(query, messages)
    await check_input(request, instance.embedding_model, [(where, question)])
    if options.query_rewrite.enabled:
        await check_input(request, instance.chat_model, [(where, question)])
        question = await _rewrite(request, instance, question)
    index = rag_store(request).index
    items = None if item_filter is None else await _filtered(index, instance, item_filter)
    retrieval = _retrieval(instance, question, options.retrieval, items)
    found = await retrieve(
        index,
        instance.uid,
        retrieval,
        lambda text: embed_query(request, instance.embedding_model, text),
    )
    return question, found


async def _filtered(index: ChunkIndex, instance: Instance, item_filter: ItemFilter) -> ItemScope:
    """The items the filter lets through; None when that is all of them (nothing to narrow)."""
    indexed = await index.indexed_items(instance.uid)
    allowed = allowed_items(item_filter, indexed)
    return None if len(allowed) == len(indexed) else allowed


def _retrieval(instance: Instance, question: str, options: RetrievalOptions, items: ItemScope) -> Retrieval:
    default_kind = RetrievalType.HYBRID if instance.hybrid else RetrievalType.VECTOR
    return Retrieval(
        question,
        options.max_num_results or instance.max_num_results,
        RetrievalType(options.retrieval_type) if options.retrieval_type else default_kind,
        instance.score_threshold if options.match_threshold is None else options.match_threshold,
        items,
    )


async def _rewrite(request: Request, instance: Instance, question: str) -> str:
    chat = ChatRequest(
        model=instance.chat_model,
        messages=rewrite_messages(question),
        sampling=SamplingParams(temperature=0.0),
        max_tokens=REWRITE_MAX_TOKENS,
    )
    engine = GatewayChatEngine(platform_of(request), step_call(request, "rewrite"))
    run = await start_chat(engine, chat)
    return rewritten_query((await run.whole()).content, question)


for _prefix in PREFIXES:
    _extra = account_parameter(_prefix)
    router.add_api_route(
        f"{_prefix}/instances/{{instance_id}}/search",
        search,
        methods=["POST"],
        summary="Search an AI Search instance's chunks",
        openapi_extra=_extra,
    )
    router.add_api_route(
        f"{_prefix}/instances/{{instance_id}}/chat/completions",
        chat_completions,
        methods=["POST"],
        summary="Answer from an AI Search instance's documents, with its sources",
        openapi_extra=_extra,
    )
