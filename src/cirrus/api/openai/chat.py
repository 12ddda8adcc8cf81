"""POST /v1/chat/completions."""

from collections.abc import AsyncIterator
from functools import partial
from typing import Any

from fastapi import APIRouter, Request

from cirrus.api.errors import error_body
from cirrus.api.inference import complete, inference_request, resolve_model, stream_response
from cirrus.api.openai.schemas import ChatCompletionRequest, finish_reason, now, response_id
from cirrus.api.protocol import WireProtocol
from cirrus.api.sse import DONE, sse_data
from cirrus.api.usage import usage_dict
from cirrus.errors import CirrusError
from cirrus.gateway.answer import Answer
from cirrus.runtime.events import TextDelta
from cirrus.runtime.params import GenerationInput

router = APIRouter(tags=["OpenAI"])


def _chunk(chat_id: str, model: str, delta: dict[str, Any], reason: str | None) -> dict[str, Any]:
    return {
        "id": chat_id,
        "object": "chat.completion.chunk",
        "created": now(),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": reason, "logprobs": None}],
    }


async def _stream(generation: Answer, model: str, usage: bool) -> AsyncIterator[bytes]:
    chat_id = response_id("chatcmpl")
    yield sse_data(_chunk(chat_id, model, {"role": "assistant", "content": ""}, None))
    try:
        async for event in generation:
            if isinstance(event, TextDelta):
                yield sse_data(_chunk(chat_id, model, {"content": event.text}, None))
                continue
            yield sse_data(_chunk(chat_id, model, {}, finish_reason(event.finish_reason)))
            if usage:
                yield sse_data(
                    {
                        "id": chat_id,
                        "object": "chat.completion.chunk",
                        "created": now(),
                        "model": model,
                        "choices": [],
                        "usage": usage_dict(event.usage),
                    }
                )
        yield DONE
    except CirrusError as error:
        yield sse_data(error_body(error, WireProtocol.OPENAI))


async def chat_completions(body: ChatCompletionRequest, request: Request) -> Any:
    spec = resolve_model(request, body.model, body.stream)
    inputs = GenerationInput(messages=body.chat_messages(), sampling=body.sampling(spec.max_tokens_default))
    inference = inference_request(request, spec.id, inputs, body.keep_alive_s())
    if body.stream:
        return await stream_response(
            request, inference, partial(_stream, model=spec.id, usage=body.include_usage)
        )
    completion = await complete(request, inference)
    return {
        "id": response_id("chatcmpl"),
        "object": "chat.completion",
        "created": now(),
        "model": spec.id,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": completion.text},
                "finish_reason": finish_reason(completion.finish_reason),
                "logprobs": None,
            }
        ],
        "usage": usage_dict(completion.usage),
    }


for _prefix in ("/v1", "/client/v4/accounts/{account_id}/ai/v1"):
    router.add_api_route(
        f"{_prefix}/chat/completions",
        chat_completions,
        methods=["POST"],
        summary="Create a chat completion (OpenAI)",
    )
