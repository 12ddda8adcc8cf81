"""What every generating route does once it has translated its body: resolve the model through the gateway,
then stream the answer's events, or wait for the whole answer while watching for the client to leave."""

from collections.abc import AsyncIterator, Callable
from dataclasses import replace

from fastapi import Request
from fastapi.responses import StreamingResponse

from cirrus.api.calls import call_of
from cirrus.api.context import affinity_of, platform_of
from cirrus.api.sse import unless_disconnected
from cirrus.catalog import ModelSpec
from cirrus.chat import ChatRequest, ChatResult, ChatRun, count_chat_tokens, start_chat
from cirrus.chat.finetune_ref import split_finetune
from cirrus.errors import InvalidInput
from cirrus.gateway.answer import Answer
from cirrus.gateway.call import Call
from cirrus.platform import Platform
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
    """The model's spec, once the caller's token may use it (checked before the model is looked up). A
    fine-tune's name (`BASE:FINETUNE`) resolves to its base model."""
    base, finetune = split_finetune(model, None)
    spec = platform_of(request).pipeline.resolve(gateway_call(request, stream), base)
    if finetune is not None and spec.task != "text-generation":
        raise InvalidInput(
            f"{spec.id} is a {spec.task} model: fine-tunes apply to text generation", param="model"
        )
    return spec


class GatewayChatEngine:
    """The chat core's engine on the gateway's pipeline, acting for one call's token: an HTTP call's
    (`for_request`), or a batch item's, whose work yields its slot to interactive requests (`preempt`)."""

    def __init__(
        self,
        platform: Platform,
        call: Call,
        affinity: str | None = None,
        preempt: Callable[[], None] | None = None,
    ) -> None:
        self.model_files = platform.model_files
        self.catalog = platform.catalog
        self._pipeline = platform.pipeline
        self._finetunes = platform.gateway.finetunes
        self._call = call
        self._affinity = affinity
        self._preempt = preempt

    @classmethod
    def for_request(cls, request: Request, stream: bool) -> "GatewayChatEngine":
        return cls(platform_of(request), gateway_call(request, stream), affinity_of(request))

    def resolve(self, model: str) -> ModelSpec:
        return self._pipeline.resolve(self._call, model)

    async def run(self, model: str, inputs: GenerationInput, request: ChatRequest) -> Answer:
        if request.lora is not None:
            inputs = replace(inputs, adapter=await self._adapter(model, request.lora))
        inference = self._inference(model, inputs, request.keep_alive_s, request.reject_if_busy)
        return await self._pipeline.run(self._call, inference)

    async def count(self, model: str, inputs: GenerationInput) -> int:
        return await self._pipeline.count_tokens(self._call, self._inference(model, inputs, None, False))

    async def _adapter(self, model: str, lora: str) -> str:
        """The fine-tune's adapter file, found in the caller's account only."""
        adapter = await self._finetunes.resolve(self._call.principal.account_id, model, lora)
        return adapter.path

    def _inference(
        self, model: str, inputs: GenerationInput, keep_alive_s: float | None, reject_if_busy: bool
    ) -> InferenceRequest:
        return InferenceRequest(
            self._call.request_id,
            model,
            inputs,
            keep_alive_s,
            self._affinity,
            reject_if_busy=reject_if_busy,
            preempt=self._preempt,
        )


async def stream_chat(request: Request, chat: ChatRequest, write: ChatWriter) -> StreamingResponse:
    """Start the answer first, so that errors before its first token are plain HTTP errors."""
    run = await start_chat(GatewayChatEngine.for_request(request, stream=True), chat)
    return StreamingResponse(write(run), media_type="text/event-stream")


async def whole_chat(request: Request, chat: ChatRequest) -> tuple[ChatRun, ChatResult]:
    """The whole answer, while watching for the client to leave."""

    async def answered() -> tuple[ChatRun, ChatResult]:
        run = await start_chat(GatewayChatEngine.for_request(request, stream=False), chat)
        return run, await run.whole()

    return await unless_disconnected(request, answered())


async def count_chat(request: Request, chat: ChatRequest) -> int:
    """The chat's prompt tokens, while watching for the client to leave (a count may wait for a cold start)."""
    engine = GatewayChatEngine.for_request(request, stream=False)
    return await unless_disconnected(request, count_chat_tokens(engine, chat))
