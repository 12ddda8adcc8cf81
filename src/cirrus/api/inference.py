"""What every generating route does once it has translated its body: resolve the model through the gateway,
then stream the answer's events, or wait for the whole answer while watching for the client to leave."""

from collections.abc import AsyncIterator, Callable

from fastapi import Request
from fastapi.responses import StreamingResponse

from cirrus.api.calls import call_of
from cirrus.api.context import affinity_of, platform_of, request_id_of
from cirrus.api.sse import unless_disconnected
from cirrus.catalog import ModelSpec
from cirrus.chat import ChatRequest, ChatResult, ChatRun, count_chat_tokens, start_chat
from cirrus.gateway.answer import Answer
from cirrus.gateway.call import Call
from cirrus.runtime.params import GenerationInput
from cirrus.service import InferenceRequest

ChatWriter = Callable[[ChatRun], AsyncIterator[bytes]]


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
    request: Request,
    model: str,
    inputs: GenerationInput,
    keep_alive_s: float | None,
    reject_if_busy: bool = False,
) -> InferenceRequest:
    affinity = affinity_of(request)
    return InferenceRequest(
        request_id_of(request), model, inputs, keep_alive_s, affinity, reject_if_busy=reject_if_busy
    )


async def _answer(request: Request, inference: InferenceRequest, stream: bool) -> Answer:
    return await platform_of(request).pipeline.run(gateway_call(request, stream), inference)


class GatewayChatEngine:
    """The chat core's engine for one HTTP call: the gateway's pipeline, acting for the call's token."""

    def __init__(self, request: Request, stream: bool) -> None:
        platform = platform_of(request)
        self.model_files = platform.model_files
        self.catalog = platform.catalog
        self._request = request
        self._stream = stream

    def resolve(self, model: str) -> ModelSpec:
        return resolve_model(self._request, model, self._stream)

    async def run(self, model: str, inputs: GenerationInput, request: ChatRequest) -> Answer:
        inference = inference_request(
            self._request, model, inputs, request.keep_alive_s, request.reject_if_busy
        )
        return await _answer(self._request, inference, self._stream)

    async def count(self, model: str, inputs: GenerationInput) -> int:
        inference = inference_request(self._request, model, inputs, None)
        call = gateway_call(self._request, self._stream)
        return await platform_of(self._request).pipeline.count_tokens(call, inference)


async def stream_chat(request: Request, chat: ChatRequest, write: ChatWriter) -> StreamingResponse:
    """Start the answer first, so that errors before its first token are plain HTTP errors."""
    run = await start_chat(GatewayChatEngine(request, stream=True), chat)
    return StreamingResponse(write(run), media_type="text/event-stream")


async def whole_chat(request: Request, chat: ChatRequest) -> tuple[ChatRun, ChatResult]:
    """The whole answer, while watching for the client to leave."""

    async def answered() -> tuple[ChatRun, ChatResult]:
        run = await start_chat(GatewayChatEngine(request, stream=False), chat)
        return run, await run.whole()

    return await unless_disconnected(request, answered())


async def count_chat(request: Request, chat: ChatRequest) -> int:
    """The chat's prompt tokens, while watching for the client to leave (a count may wait for a cold start)."""
    engine = GatewayChatEngine(request, stream=False)
    return await unless_disconnected(request, count_chat_tokens(engine, chat))
