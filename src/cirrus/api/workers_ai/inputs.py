"""A Workers AI body checked against its model's task: the `/ai/run` route and the embedded SDK read it alike."""

from dataclasses import replace
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from cirrus.api.validation import invalid_input
from cirrus.api.workers_ai.schemas import (
    EMBEDDING_FIELDS,
    GENERATION_FIELDS,
    TextEmbeddingsInput,
    TextGenerationInput,
)
from cirrus.catalog import ModelSpec
from cirrus.chat import ChatRequest
from cirrus.errors import InvalidInput

InputModel = TypeVar("InputModel", bound=BaseModel)
INPUTS: dict[str, type[BaseModel]] = {
    "text-generation": TextGenerationInput,
    "text-embeddings": TextEmbeddingsInput,
}
WHAT_TO_SEND = {
    "text-generation": "'prompt' or 'messages'",
    "text-embeddings": "'text' (a string or a list of strings)",
}


def task_input(spec: ModelSpec, body: dict[str, Any]) -> TextGenerationInput | TextEmbeddingsInput:
    _check_task(spec, body)
    if spec.task == "text-embeddings":
        return _validated(TextEmbeddingsInput, body)
    return _validated(TextGenerationInput, body)


def chat_request(spec: ModelSpec, body: TextGenerationInput) -> ChatRequest:
    """Workers AI documents JSON mode as not streamed; the other protocols stream it."""
    options = body.chat_options()
    if options.json_format is not None and options.stream:
        raise InvalidInput(
            "JSON mode (response_format) cannot be streamed: send stream false", param="stream"
        )
    messages = body.chat_messages()
    chat = body.chat_request(spec.id, messages, options, prompt=body.prompt, raw=body.raw)
    return replace(chat, lora=body.lora)


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
