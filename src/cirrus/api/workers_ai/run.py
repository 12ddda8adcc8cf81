"""POST /ai/run/{model}: Workers AI's one call."""

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request

from cirrus.api.inference import complete, inference_request, resolve_model, stream_response
from cirrus.api.sse import DONE, sse_data
from cirrus.api.usage import usage_dict
from cirrus.api.workers_ai.schemas import TextGenerationInput, envelope
from cirrus.errors import CirrusError
from cirrus.gateway.answer import Answer
from cirrus.runtime.events import TextDelta

router = APIRouter(tags=["Workers AI"])


async def _events(generation: Answer) -> AsyncIterator[bytes]:
    try:
        async for event in generation:
            if isinstance(event, TextDelta):
                yield sse_data({"response": event.text})
            else:
                yield sse_data({"response": "", "usage": usage_dict(event.usage)})
        yield DONE
    except CirrusError as error:
        yield sse_data({"success": False, "errors": [{"code": error.code, "message": error.message}]})


async def run_model(model: str, body: TextGenerationInput, request: Request) -> Any:
    spec = resolve_model(request, model, body.stream)
    inputs = body.generation_input(spec.max_tokens_default)
    inference = inference_request(request, spec.id, inputs, body.keep_alive_s())
    if body.stream:
        return await stream_response(request, inference, _events)
    completion = await complete(request, inference)
    return envelope({"response": completion.text, "usage": usage_dict(completion.usage)})


for _path in ("/ai/run/{model:path}", "/client/v4/accounts/{account_id}/ai/run/{model:path}"):
    router.add_api_route(
        _path,
        run_model,
        methods=["POST"],
        summary="Run a model (Workers AI)",
        responses={200: {"description": "the result envelope, or text/event-stream when stream is true"}},
    )
