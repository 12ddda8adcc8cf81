"""One item of an OpenAI batch, run as its route would answer it whole: the same body checks, the same chat core
or embedding call, the same response body, through the gateway pipeline for the batch's token. It runs as
background work: `preempt` hands its slot back to interactive requests."""

import time
from collections.abc import Callable
from typing import Any

from cirrus.api.batch_calls import TRANSIENT, batch_call, waiving
from cirrus.api.inference import GatewayChatEngine
from cirrus.api.keep_alive import parse_keep_alive
from cirrus.api.openai.batch_endpoints import BatchRequest, parsed_request
from cirrus.api.openai.batch_output import failure, success
from cirrus.api.openai.chat import chat_completion_body, chat_request_of
from cirrus.api.openai.completions import completion_body, completion_request_of
from cirrus.api.openai.embeddings import EmbeddingRequest, embeddings_body
from cirrus.api.openai.schemas import ChatCompletionRequest
from cirrus.batches import Claim, ItemState
from cirrus.batches.runner import Outcome, Preempt, RetryLater
from cirrus.chat import start_chat
from cirrus.errors import CirrusError
from cirrus.gateway.call import Call
from cirrus.platform import Platform
from cirrus.service import EmbeddingRequest as Embedding

Clock = Callable[[], float]


class OpenAiItems:
    def __init__(self, platform: Platform, clock: Clock = time.time) -> None:
        self._platform = platform
        self._clock = clock

    async def execute(self, claim: Claim, preempt: Preempt) -> Outcome:
        try:
            call = await batch_call(self._platform, claim)
            preempt = waiving(call, preempt)
            request = parsed_request(claim.batch.metadata["endpoint"], claim.item.body)
            body = await self._answer(call, request, preempt)
        except TRANSIENT as error:
            raise RetryLater(error.retry_after_s or 10.0) from error
        except CirrusError as error:
            return Outcome(ItemState.FAILED, error=failure(error, self._clock()))
        return Outcome(ItemState.SUCCEEDED, result=success(body, self._clock()), usage=body.get("usage"))

    async def _answer(self, call: Call, request: BatchRequest, preempt: Preempt) -> dict[str, Any]:
        if isinstance(request, EmbeddingRequest):
            return await self._embed(call, request, preempt)
        engine = GatewayChatEngine(self._platform, call, preempt=preempt)
        if isinstance(request, ChatCompletionRequest):
            run = await start_chat(engine, chat_request_of(request))
            return chat_completion_body(run.model, await run.whole())
        run = await start_chat(engine, completion_request_of(request))
        return completion_body(request, run.model, await run.whole())

    async def _embed(self, call: Call, request: EmbeddingRequest, preempt: Preempt) -> dict[str, Any]:
        spec = self._platform.pipeline.resolve(call, request.model)
        embedding = Embedding(
            call.request_id,
            spec.id,
            request.embedding_input(),
            parse_keep_alive(request.keep_alive),
            call.deadline,
            preempt,
        )
        result = await self._platform.pipeline.embed(call, embedding)
        return embeddings_body(request, spec.id, result)
