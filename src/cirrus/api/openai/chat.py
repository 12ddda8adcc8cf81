"""POST /v1/chat/completions."""

from collections.abc import AsyncIterator
from functools import partial
from typing import Any

from fastapi import APIRouter, Request

from cirrus.api.chat.answer import ChatResult, ChatStream, parse_whole
from cirrus.api.chat.family_lookup import model_family
from cirrus.api.chat.plan import ChatPlan, plan_chat
from cirrus.api.context import platform_of
from cirrus.api.errors import error_body
from cirrus.api.inference import complete, inference_request, resolve_model, stream_response
from cirrus.api.openai.schemas import ChatCompletionRequest, now, response_id
from cirrus.api.path_parameters import account_parameter
from cirrus.api.protocol import WireProtocol
from cirrus.api.sse import DONE, sse_data
from cirrus.api.usage import usage_dict
from cirrus.errors import CirrusError
from cirrus.families import ChatDelta
from cirrus.gateway.answer import Answer
from cirrus.runtime.events import TextDelta

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


async def _stream(generation: Answer, model: str, usage: bool, plan: ChatPlan) -> AsyncIterator[bytes]:
    chat_id = response_id("chatcmpl")
    parsed = ChatStream(plan)
    yield sse_data(_chunk(chat_id, model, {"role": "assistant", "content": ""}, None))
    try:
        async for event in generation:
            if isinstance(event, TextDelta):
                for delta in _deltas(parsed.feed(event.text)):
                    yield sse_data(_chunk(chat_id, model, delta, None))
                continue
            for delta in _deltas(parsed.finish()):
                yield sse_data(_chunk(chat_id, model, delta, None))
            yield sse_data(_chunk(chat_id, model, {}, parsed.finish_reason(event.finish_reason)))
            if usage:
                reasoning = parsed.reasoning_tokens(event.usage)
                body = _chunk(chat_id, model, {}, None) | {"choices": []}
                yield sse_data(body | {"usage": usage_dict(event.usage, reasoning)})
        yield DONE
    except CirrusError as error:
        yield sse_data(error_body(error, WireProtocol.OPENAI))


def _message(result: ChatResult) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": result.content or None}
    if result.reasoning:
        message["reasoning_content"] = result.reasoning
    if result.tool_calls:
        message["tool_calls"] = [call.to_openai() for call in result.tool_calls]
    elif message["content"] is None:
        message["content"] = ""
    return message


async def chat_completions(body: ChatCompletionRequest, request: Request) -> Any:
    spec = resolve_model(request, body.model, body.stream)
    options = body.chat_options()
    family = await model_family(spec, platform_of(request).model_files, platform_of(request).catalog)
    sampling = body.sampling(spec.max_tokens_default)
    plan = plan_chat(family, body.chat_messages(), options, sampling)
    inference = inference_request(request, spec.id, plan.inputs, body.keep_alive_s())
    if body.stream:
        writer = partial(_stream, model=spec.id, usage=body.include_usage, plan=plan)
        return await stream_response(request, inference, writer)
    completion = await complete(request, inference)
    result = parse_whole(plan, completion.text, completion.finish_reason, completion.usage)
    return {
        "id": response_id("chatcmpl"),
        "object": "chat.completion",
        "created": now(),
        "model": spec.id,
        "choices": [
            {"index": 0, "message": _message(result), "finish_reason": result.finish_reason, "logprobs": None}
        ],
        "usage": usage_dict(completion.usage, result.reasoning_tokens),
    }


for _prefix in ("/v1", "/client/v4/accounts/{account_id}/ai/v1"):
    router.add_api_route(
        f"{_prefix}/chat/completions",
        chat_completions,
        methods=["POST"],
        summary="Create a chat completion (OpenAI)",
        openapi_extra=account_parameter(_prefix),
    )
