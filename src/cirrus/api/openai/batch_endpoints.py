"""The routes a batch's requests may name, and each request's body read as that route reads it: the same schema,
and the same checks the route makes before it answers, so a body the route would refuse is refused when the
batch is created, not when its item runs."""

from typing import Any

from pydantic import ValidationError

from cirrus.api.keep_alive import parse_keep_alive
from cirrus.api.openai.chat import chat_request_of
from cirrus.api.openai.completions import completion_request_of
from cirrus.api.openai.embeddings import EmbeddingRequest
from cirrus.api.openai.schemas import ChatCompletionRequest, CompletionRequest
from cirrus.api.validation import invalid_input
from cirrus.errors import InvalidInput

BatchRequest = ChatCompletionRequest | CompletionRequest | EmbeddingRequest
SCHEMAS: dict[str, type[BatchRequest]] = {
    "/v1/chat/completions": ChatCompletionRequest,
    "/v1/completions": CompletionRequest,
    "/v1/embeddings": EmbeddingRequest,
}


def parsed_request(endpoint: str, body: dict[str, Any]) -> BatchRequest:
    """InvalidInput, its `param` a field of the body, for a body that route would refuse, or one that streams."""
    try:
        request = SCHEMAS[endpoint].model_validate(body)
    except ValidationError as error:
        raise invalid_input(error.errors()) from None
    if not isinstance(request, EmbeddingRequest) and request.stream:
        raise InvalidInput("'stream': a batch request cannot stream; leave 'stream' out", param="stream")
    _prepare(request)
    return request


def _prepare(request: BatchRequest) -> None:
    """What the route works out from its body before it runs, and may refuse."""
    if isinstance(request, ChatCompletionRequest):
        chat_request_of(request)
    elif isinstance(request, CompletionRequest):
        completion_request_of(request)
    else:
        request.embedding_input()
        parse_keep_alive(request.keep_alive)
