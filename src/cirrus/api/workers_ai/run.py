"""POST /ai/run/{model}: Workers AI's one call. The body's shape follows the model's task, so the model is
resolved first and the body validated against its task's input."""

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request
from pydantic.json_schema import models_json_schema

from cirrus.api.context import platform_of
from cirrus.api.embeddings import embed
from cirrus.api.inference import resolve_model, stream_chat, whole_chat
from cirrus.api.path_parameters import account_parameter
from cirrus.api.sse import DONE, sse_data
from cirrus.api.workers_ai.batch import queue_or_poll
from cirrus.api.workers_ai.encode import embedding_body, result_body, stream_payloads
from cirrus.api.workers_ai.inputs import INPUTS, chat_request, task_input
from cirrus.api.workers_ai.schemas import (
    TextEmbeddingsInput,
    TextGenerationInput,
    envelope,
)
from cirrus.catalog import ModelSpec
from cirrus.chat import ChatRun
from cirrus.chat.finetune_ref import split_finetune
from cirrus.errors import CirrusError, InvalidInput

router = APIRouter(tags=["Workers AI"])
SCHEMA_REF = "#/components/schemas/{model}"


async def workers_ai_events(run: ChatRun) -> AsyncIterator[bytes]:
    try:
        async for event in run:
            for payload in stream_payloads(event):
                yield sse_data(payload)
        yield DONE
    except CirrusError as error:
        yield sse_data({"success": False, "errors": [{"code": error.code, "message": error.message}]})


async def _generate(request: Request, spec: ModelSpec, body: TextGenerationInput) -> Any:
    chat = chat_request(spec, body)
    if body.stream:
        return await stream_chat(request, chat, workers_ai_events)
    run, result = await whole_chat(request, chat)
    return envelope(result_body(result, run.json_mode, run.raw))


async def _embed(request: Request, spec: ModelSpec, body: TextEmbeddingsInput) -> Any:
    result = await embed(request, spec.id, body.embedding_input(), body.keep_alive_s())
    return envelope(embedding_body(result))


async def run_model(
    model: str,
    request: Request,
    body: Annotated[dict[str, Any], Body()],
    queue_request: Annotated[bool, Query(alias="queueRequest")] = False,
) -> Any:
    """With `queueRequest=true`, Workers AI's async Batch API (`api.workers_ai.batch`)."""
    stream = body.get("stream") is True and not queue_request
    model, body = _finetune_into_body(model, body, queue_request)
    spec = resolve_model(request, model, stream)
    if queue_request:
        return await queue_or_poll(request, platform_of(request), spec, body)
    inputs = task_input(spec, body)
    if isinstance(inputs, TextEmbeddingsInput):
        return await _embed(request, spec, inputs)
    return await _generate(request, spec, inputs)


def _finetune_into_body(model: str, body: dict[str, Any], queue_request: bool) -> tuple[str, dict[str, Any]]:
    """A fine-tune named in the path (`BASE:FINETUNE`) as if sent in the body's `lora`."""
    sent = body.get("lora")
    base, finetune = split_finetune(model, sent if isinstance(sent, str) else None)
    if finetune is None or finetune == sent:
        return base, body
    if queue_request:
        raise InvalidInput(
            "a queued batch names its fine-tune in each request's 'lora', not in the model path",
            param="model",
        )
    return base, {**body, "lora": finetune}


def input_schemas() -> dict[str, Any]:
    """The task inputs as OpenAPI component schemas: the run routes' body refers to them, though the route
    validates the body itself (its shape depends on the model)."""
    _, schemas = models_json_schema(
        [(model, "validation") for model in INPUTS.values()], ref_template=SCHEMA_REF
    )
    definitions: dict[str, Any] = schemas.get("$defs", {})
    return definitions


_BODY = {
    "requestBody": {
        "content": {
            "application/json": {
                "schema": {"oneOf": [{"$ref": SCHEMA_REF.format(model=m.__name__)} for m in INPUTS.values()]}
            }
        }
    }
}

for _path in ("/ai/run/{model:path}", "/client/v4/accounts/{account_id}/ai/run/{model:path}"):
    router.add_api_route(
        _path,
        run_model,
        methods=["POST"],
        summary="Run a model (Workers AI)",
        description="The body is the model's task input: TextGenerationInput or TextEmbeddingsInput.",
        responses={200: {"description": "the result envelope, or text/event-stream when stream is true"}},
        openapi_extra={**_BODY, **account_parameter(_path)},
    )
