"""POST /v1/chat/completions."""

from collections.abc import AsyncIterator
from functools import partial
from typing import Any

from fastapi import APIRouter, Request

from cirrus.api.errors import error_body
from cirrus.api.inference import stream_chat, whole_chat
from cirrus.api.openai.schemas import ChatCompletionRequest, now, response_id
from cirrus.api.path_parameters import account_parameter
from cirrus.api.protocol import WireProtocol
from cirrus.api.sse import DONE, sse_data
from cirrus.api.usage import usage_dict
from cirrus.chat import ChatDelta, ChatEnd, ChatRequest, ChatResult, ChatRun
from cirrus.errors import CirrusError

router = APIRouter(tags=["OpenAI"])


def _chunk(chat_id: str, model: str, delta: dict[str, Any], reason: str | None) -> dict[str, Any]:
    return {
        "id": chat_id,
        "object": "chat.completion.chunk",
        "created": now(),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": reason, "logprobs": None}],
    }


def _deltas(delta: ChatDelta) -> list[dict[str, Any]]:
    """One chunk's delta per kind of text, reasoning first, then one per tool call."""
    deltas: list[dict[str, Any]] = []
    if delta.reasoning:
        deltas.append({"reasoning_content": delta.reasoning})
    if delta.content:
        deltas.append({"content": delta.content})
    deltas.extend({"tool_calls": [call.to_openai()]} for call in delta.tool_calls)
    return deltas


async def chat_stream(run: ChatRun, usage: bool) -> AsyncIterator[bytes]:
    chat_id = response_id("chatcmpl")
    yield sse_data(_chunk(chat_id, run.model, {"role": "assistant", "content": ""}, None))
    try:
        async for event in run:
            if isinstance(event, ChatDelta):
                for delta in _deltas(event):
                    yield sse_data(_chunk(chat_id, run.model, delta, None))
                continue
            yield sse_data(_chunk(chat_id, run.model, {}, event.finish_reason))
            if usage:
                yield sse_data(_usage_chunk(chat_id, run.model, event))
        yield DONE
    except CirrusError as error:
        yield sse_data(error_body(error, WireProtocol.OPENAI))


def _usage_chunk(chat_id: str, model: str, end: ChatEnd) -> dict[str, Any]:
    body = _chunk(chat_id, model, {}, None) | {"choices": []}
    return body | {"usage": usage_dict(end.usage, end.reasoning_tokens)}


def _message(result: ChatResult) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": result.content or None}
    if result.reasoning:
        message["reasoning_content"] = result.reasoning
    if result.tool_calls:
        message["tool_calls"] = [call.to_openai() for call in result.tool_calls]
    elif message["content"] is None:
        message["content"] = ""
    return message


def chat_request_of(body: ChatCompletionRequest) -> ChatRequest:
    """The chat core's request for a chat completion (raises InvalidInput for options it cannot take)."""
    return body.chat_request(body.model, body.chat_messages(), body.chat_options())


def chat_completion_body(model: str, result: ChatResult) -> dict[str, Any]:
    """A whole chat completion, as the route answers it and a batch's output file carries it."""
    return {
        "id": response_id("chatcmpl"),
        "object": "chat.completion",
        "created": now(),
        "model": model,
        "choices": [
            {"index": 0, "message": _message(result), "finish_reason": result.finish_reason, "logprobs": None}
        ],
        "usage": usage_dict(result.usage, result.reasoning_tokens),
    }


async def chat_completions(body: ChatCompletionRequest, request: Request) -> Any:
    chat = chat_request_of(body)
    if body.stream:
        return await stream_chat(request, chat, partial(chat_stream, usage=body.include_usage))
    run, result = await whole_chat(request, chat)
    return chat_completion_body(run.model, result)


for _prefix in ("/v1", "/client/v4/accounts/{account_id}/ai/v1"):
    router.add_api_route(
        f"{_prefix}/chat/completions",
        chat_completions,
        methods=["POST"],
        summary="Create a chat completion (OpenAI)",
        openapi_extra=account_parameter(_prefix),
    )
