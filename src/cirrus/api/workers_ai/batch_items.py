"""One item of a Workers AI batch, run as `/ai/run` would answer it whole: the same input checks, the same chat
core, the same result body. It runs as background work: `preempt` hands its slot back to interactive requests."""

from typing import Any

from cirrus.api.batch_calls import TRANSIENT, batch_call, waiving
from cirrus.api.inference import GatewayChatEngine
from cirrus.api.workers_ai.encode import embedding_body, result_body
from cirrus.api.workers_ai.inputs import chat_request, task_input
from cirrus.api.workers_ai.schemas import TextEmbeddingsInput, TextGenerationInput
from cirrus.batches import Claim, ItemState
from cirrus.batches.runner import Outcome, Preempt, RetryLater
from cirrus.catalog import ModelSpec
from cirrus.chat import start_chat
from cirrus.errors import CirrusError
from cirrus.gateway.call import Call
from cirrus.platform import Platform
from cirrus.service import EmbeddingRequest


class WorkersAiItems:
    def __init__(self, platform: Platform) -> None:
        self._platform = platform

    async def execute(self, claim: Claim, preempt: Preempt) -> Outcome:
        try:
            call = await batch_call(self._platform, claim)
            preempt = waiving(call, preempt)
            spec = self._platform.pipeline.resolve(call, claim.batch.model)
            inputs = task_input(spec, claim.item.body)
            if isinstance(inputs, TextEmbeddingsInput):
                body = await self._embed(call, spec, inputs, preempt)
            else:
                body = await self._generate(call, spec, inputs, preempt)
        except TRANSIENT as error:
            raise RetryLater(error.retry_after_s or 10.0) from error
        except CirrusError as error:
            return Outcome(ItemState.FAILED, error={"code": error.code, "message": error.message})
        return Outcome(ItemState.SUCCEEDED, result=body, usage=body.get("usage"))

    async def _generate(
        self, call: Call, spec: ModelSpec, inputs: TextGenerationInput, preempt: Preempt
    ) -> dict[str, Any]:
        engine = GatewayChatEngine(self._platform, call, preempt=preempt)
        run = await start_chat(engine, chat_request(spec, inputs))
        return result_body(await run.whole(), run.json_mode, run.raw)

    async def _embed(
        self, call: Call, spec: ModelSpec, inputs: TextEmbeddingsInput, preempt: Preempt
    ) -> dict[str, Any]:
        request = EmbeddingRequest(
            call.request_id, spec.id, inputs.embedding_input(), inputs.keep_alive_s(), call.deadline, preempt
        )
        result = await self._platform.pipeline.embed(call, request)
        usage = {"prompt_tokens": result.usage.prompt_tokens, "total_tokens": result.usage.prompt_tokens}
        return {**embedding_body(result), "usage": usage}
