"""POST /v1/completions: plain text completion (the prompt is sent raw, no chat template)."""

from collections.abc import AsyncIterator
from functools import partial
from typing import Any

from fastapi import APIRouter, Request

from cirrus.api.errors import error_body
from cirrus.api.inference import stream_chat, whole_chat
from cirrus.api.openai.schemas import CompletionRequest, finish_reason, now, response_id
from cirrus.api.path_parameters import account_parameter
from cirrus.api.protocol import WireProtocol
from cirrus.api.sse import DONE, sse_data
from cirrus.api.usage import usage_dict
from cirrus.chat import ChatDelta, ChatOptions, ChatRequest, ChatResult, ChatRun
from cirrus.errors import CirrusError

router = APIRouter(tags=["OpenAI"])


def _choice(text: str, reason: str | None) -> dict[str, Any]:
    return {"index": 0, "text": text, "finish_reason": reason, "logprobs": None}


def _body(completion_id: str, model: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": completion_id,
        "object": "text_completion",
        "created": now(),
        "model": model,
        "choices": choices,
    }


async def _stream(run: ChatRun, usage: bool) -> AsyncIterator[bytes]:
    completion_id = response_id("cmpl")
    try:
        async for event in run:
            if isinstance(event, ChatDelta):
                yield sse_data(_body(completion_id, run.model, [_choice(event.content, None)]))
                continue
            reason = finish_reason(event.finish_reason)
            yield sse_data(_body(completion_id, run.model, [_choice("", reason)]))
            if usage:
                yield sse_data({**_body(completion_id, run.model, []), "usage": usage_dict(event.usage)})
        yield DONE
    except CirrusError as error:
        yield sse_data(error_body(error, WireProtocol.OPENAI))


def completion_request_of(body: CompletionRequest) -> ChatRequest:
    """The chat core's request for a text completion: the prompt, raw."""
    return body.chat_request(body.model, None, ChatOptions(stream=body.stream), prompt=body.prompt, raw=True)


def completion_body(body: CompletionRequest, model: str, result: ChatResult) -> dict[str, Any]:
    """A whole text completion, as the route answers it and a batch's output file carries it."""
    text = body.prompt + result.content if body.echo else result.content
    choices = [_choice(text, finish_reason(result.finish_reason))]
    return {**_body(response_id("cmpl"), model, choices), "usage": usage_dict(result.usage)}


async def completions(body: CompletionRequest, request: Request) -> Any:
    chat = completion_request_of(body)
    if body.stream:
        return await stream_chat(request, chat, partial(_stream, usage=body.include_usage))
    run, result = await whole_chat(request, chat)
    return completion_body(body, run.model, result)


for _prefix in ("/v1", "/client/v4/accounts/{account_id}/ai/v1"):
    router.add_api_route(
        f"{_prefix}/completions",
        completions,
        methods=["POST"],
        summary="Create a text completion (OpenAI)",
        openapi_extra=account_parameter(_prefix),
    )
