"""POST /v1/completions: plain text completion (the prompt is sent raw, no chat template)."""

from collections.abc import AsyncIterator
from functools import partial
from typing import Any

from fastapi import APIRouter, Request

from cirrus.api.errors import error_body
from cirrus.api.inference import complete, inference_request, resolve_model, stream_response
from cirrus.api.openai.schemas import CompletionRequest, finish_reason, now, response_id
from cirrus.api.path_parameters import account_parameter
from cirrus.api.protocol import WireProtocol
from cirrus.api.sse import DONE, sse_data
from cirrus.api.usage import usage_dict
from cirrus.errors import CirrusError
from cirrus.gateway.answer import Answer
from cirrus.runtime.events import TextDelta
from cirrus.runtime.params import GenerationInput

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


async def _stream(generation: Answer, model: str, usage: bool) -> AsyncIterator[bytes]:
    completion_id = response_id("cmpl")
    try:
        async for event in generation:
            if isinstance(event, TextDelta):
                yield sse_data(_body(completion_id, model, [_choice(event.text, None)]))
                continue
            yield sse_data(_body(completion_id, model, [_choice("", finish_reason(event.finish_reason))]))
            if usage:
                yield sse_data({**_body(completion_id, model, []), "usage": usage_dict(event.usage)})
        yield DONE
    except CirrusError as error:
        yield sse_data(error_body(error, WireProtocol.OPENAI))


async def completions(body: CompletionRequest, request: Request) -> Any:
    spec = resolve_model(request, body.model, body.stream)
    inputs = GenerationInput(prompt=body.prompt, raw=True, sampling=body.sampling(spec.max_tokens_default))
    inference = inference_request(request, spec.id, inputs, body.keep_alive_s())
    if body.stream:
        return await stream_response(
            request, inference, partial(_stream, model=spec.id, usage=body.include_usage)
        )
    completion = await complete(request, inference)
    text = body.prompt + completion.text if body.echo else completion.text
    choices = [_choice(text, finish_reason(completion.finish_reason))]
    return {**_body(response_id("cmpl"), spec.id, choices), "usage": usage_dict(completion.usage)}


for _prefix in ("/v1", "/client/v4/accounts/{account_id}/ai/v1"):
    router.add_api_route(
        f"{_prefix}/completions",
        completions,
        methods=["POST"],
        summary="Create a text completion (OpenAI)",
        openapi_extra=account_parameter(_prefix),
    )
