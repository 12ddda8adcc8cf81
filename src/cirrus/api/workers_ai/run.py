"""POST /ai/run/{model}: Workers AI's one call. The body's shape follows the model's task, so the model is
resolved first and the body validated against its task's input."""

import json
from collections.abc import AsyncIterator
from functools import partial
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Body, Request
from pydantic import BaseModel, ValidationError
from pydantic.json_schema import models_json_schema

from cirrus.api.chat.answer import ChatResult, ChatStream, parse_whole
from cirrus.api.chat.family_lookup import model_family
from cirrus.api.chat.plan import ChatPlan, plan_chat
from cirrus.api.context import platform_of
from cirrus.api.embeddings import embed
from cirrus.api.inference import complete, inference_request, resolve_model, stream_response
from cirrus.api.path_parameters import account_parameter
from cirrus.api.sse import DONE, sse_data
from cirrus.api.usage import usage_dict
from cirrus.api.validation import invalid_input
from cirrus.api.workers_ai.schemas import (
    EMBEDDING_FIELDS,
    GENERATION_FIELDS,
    TextEmbeddingsInput,
    TextGenerationInput,
    envelope,
)
from cirrus.catalog import ModelSpec
from cirrus.errors import CirrusError, InvalidInput
from cirrus.families import ChatDelta, ToolCall
from cirrus.gateway.answer import Answer
from cirrus.runtime.events import TextDelta

router = APIRouter(tags=["Workers AI"])
InputModel = TypeVar("InputModel", bound=BaseModel)
INPUTS: dict[str, type[BaseModel]] = {
    "text-generation": TextGenerationInput,
    "text-embeddings": TextEmbeddingsInput,
}
SCHEMA_REF = "#/components/schemas/{model}"
WHAT_TO_SEND = {
    "text-generation": "'prompt' or 'messages'",
    "text-embeddings": "'text' (a string or a list of strings)",
}


def _tool_calls(calls: tuple[ToolCall, ...]) -> list[dict[str, Any]]:
    """Workers AI's shape, `{"name", "arguments"}` with the arguments as an object, plus the call's `id` (which a
    tool result may send back as `tool_call_id`)."""
    return [{"id": c.id, "name": c.name, "arguments": json.loads(c.arguments)} for c in calls]


def _stream_events(delta: ChatDelta) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    if delta.reasoning:
        events.append({"response": "", "reasoning": delta.reasoning})
    if delta.content:
        events.append({"response": delta.content})
    if delta.tool_calls:
        events.append({"response": "", "tool_calls": _tool_calls(tuple(d.call for d in delta.tool_calls))})
    return events


async def _events(generation: Answer, plan: ChatPlan | None) -> AsyncIterator[bytes]:
    parsed = ChatStream(plan) if plan is not None else None
    try:
        async for event in generation:
            if isinstance(event, TextDelta):
                deltas = _stream_events(parsed.feed(event.text)) if parsed else [{"response": event.text}]
                for payload in deltas:
                    yield sse_data(payload)
                continue
            for payload in _stream_events(parsed.finish()) if parsed else []:
                yield sse_data(payload)
            reasoning = parsed.reasoning_tokens(event.usage) if parsed else None
            yield sse_data({"response": "", "usage": usage_dict(event.usage, reasoning)})
        yield DONE
    except CirrusError as error:
        yield sse_data({"success": False, "errors": [{"code": error.code, "message": error.message}]})


def _chat_result(result: ChatResult, json_mode: bool) -> dict[str, Any]:
    """`response` is the answer's text, or in JSON mode the JSON value itself, as Workers AI answers it."""
    body: dict[str, Any] = {"response": result.json_value if json_mode else result.content}
    if result.reasoning:
        body["reasoning"] = result.reasoning
    if result.tool_calls:
        body["tool_calls"] = _tool_calls(result.tool_calls)
    return body


def _check_task(spec: ModelSpec, body: dict[str, Any]) -> None:
    """A body made for the other task gets an answer naming this model's task, not a missing field."""
    theirs = EMBEDDING_FIELDS if spec.task == "text-generation" else GENERATION_FIELDS
    ours = GENERATION_FIELDS if spec.task == "text-generation" else EMBEDDING_FIELDS
    sent = sorted(theirs & body.keys())
    if sent and not ours & body.keys():
        raise InvalidInput(
            f"{spec.id} is a {spec.task} model: send {WHAT_TO_SEND[spec.task]}, not '{sent[0]}'",
            param=sent[0],
        )


def _validated(model: type[InputModel], body: dict[str, Any]) -> InputModel:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise invalid_input(exc.errors()) from None


async def _plan(request: Request, spec: ModelSpec, body: TextGenerationInput) -> ChatPlan | None:
    """None for a raw prompt, which is sent as it is; chat features need a chat template."""
    if body.raw and body.prompt is not None:
        return None
    family = await model_family(spec, platform_of(request).model_files, platform_of(request).catalog)
    sampling = body.sampling(spec.max_tokens_default)
    return plan_chat(family, body.chat_messages(), body.chat_options(), sampling, prompt=body.prompt)


async def _generate(request: Request, spec: ModelSpec, body: TextGenerationInput) -> Any:
    plan = await _plan(request, spec, body)
    inputs = plan.inputs if plan else body.generation_input(spec.max_tokens_default)
    inference = inference_request(request, spec.id, inputs, body.keep_alive_s())
    if body.stream:
        return await stream_response(request, inference, partial(_events, plan=plan))
    completion = await complete(request, inference)
    if plan is None:
        return envelope({"response": completion.text, "usage": usage_dict(completion.usage)})
    result = parse_whole(plan, completion.text, completion.finish_reason, completion.usage)
    usage = usage_dict(completion.usage, result.reasoning_tokens)
    return envelope({**_chat_result(result, plan.json_mode), "usage": usage})


async def _embed(request: Request, spec: ModelSpec, body: TextEmbeddingsInput) -> Any:
    result = await embed(request, spec.id, body.embedding_input(), body.keep_alive_s())
    dimensions = len(result.vectors[0]) if result.vectors else 0
    return envelope({"shape": [len(result.vectors), dimensions], "data": result.vectors})


async def run_model(model: str, request: Request, body: Annotated[dict[str, Any], Body()]) -> Any:
    stream = body.get("stream") is True
    spec = resolve_model(request, model, stream)
    _check_task(spec, body)
    if spec.task == "text-embeddings":
        return await _embed(request, spec, _validated(TextEmbeddingsInput, body))
    return await _generate(request, spec, _validated(TextGenerationInput, body))


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
