"""What every generating route does once it has translated its body: stream the events, or wait for the whole
answer while watching for the client to leave."""

from collections.abc import AsyncIterator, Callable

from fastapi import Request
from fastapi.responses import StreamingResponse

from cirrus.api.context import affinity_of, platform_of, request_id_of
from cirrus.api.sse import unless_disconnected
from cirrus.runtime.params import GenerationInput
from cirrus.service import Completion, Generation, InferenceRequest

EventWriter = Callable[[Generation], AsyncIterator[bytes]]


def inference_request(
    request: Request, model: str, inputs: GenerationInput, keep_alive_s: float | None
) -> InferenceRequest:
    return InferenceRequest(request_id_of(request), model, inputs, keep_alive_s, affinity_of(request))


async def stream_response(
    request: Request, inference: InferenceRequest, write: EventWriter
) -> StreamingResponse:
    """Start the generation first, so that errors before its first token are plain HTTP errors."""
    generation = await platform_of(request).service.start(inference)
    return StreamingResponse(write(generation), media_type="text/event-stream")


async def complete(request: Request, inference: InferenceRequest) -> Completion:
    return await unless_disconnected(request, platform_of(request).service.complete(inference))
