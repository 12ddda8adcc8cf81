"""What every generating route does once it has translated its body: resolve the model through the gateway,
then stream the answer's events, or wait for the whole answer while watching for the client to leave."""

from collections.abc import AsyncIterator, Callable

from fastapi import Request
from fastapi.responses import StreamingResponse

from cirrus.api.calls import call_of
from cirrus.api.context import affinity_of, platform_of, request_id_of
from cirrus.api.sse import unless_disconnected
from cirrus.catalog import ModelSpec
from cirrus.gateway.answer import Answer
from cirrus.gateway.call import Call
from cirrus.runtime.params import GenerationInput
from cirrus.service import Completion, InferenceRequest

EventWriter = Callable[[Answer], AsyncIterator[bytes]]


def gateway_call(request: Request, stream: bool) -> Call:
    """The gateway's view of this call; its deadline (arrival plus the request time limit) is what the pipeline
    passes on to the service."""
    settings = platform_of(request).settings
    return call_of(
        request, stream=stream, log_prompts=settings.log_prompts, timeout_s=settings.request_timeout_s
    )


def resolve_model(request: Request, model: str, stream: bool) -> ModelSpec:
    """The model's spec, once the caller's token may use it (checked before the model is looked up)."""
    return platform_of(request).pipeline.resolve(gateway_call(request, stream), model)


def inference_request(
    request: Request, model: str, inputs: GenerationInput, keep_alive_s: float | None
) -> InferenceRequest:
    return InferenceRequest(request_id_of(request), model, inputs, keep_alive_s, affinity_of(request))


async def _answer(request: Request, inference: InferenceRequest, stream: bool) -> Answer:
    return await platform_of(request).pipeline.run(gateway_call(request, stream), inference)


async def stream_response(
    request: Request, inference: InferenceRequest, write: EventWriter
) -> StreamingResponse:
    """Start the answer first, so that errors before its first token are plain HTTP errors."""
    answer = await _answer(request, inference, stream=True)
    return StreamingResponse(write(answer), media_type="text/event-stream")


async def complete(request: Request, inference: InferenceRequest) -> Completion:
    async def collected() -> Completion:
        return await (await _answer(request, inference, stream=False)).collect()

    return await unless_disconnected(request, collected())
