"""What both protocols' embedding routes share: reading the texts a client sent, and running them through the
gateway while watching for the client to leave."""

from typing import Any

from fastapi import Request

from cirrus.api.context import platform_of, request_id_of
from cirrus.api.inference import gateway_call
from cirrus.api.sse import unless_disconnected
from cirrus.errors import InvalidInput
from cirrus.runtime.embedding import MAX_TEXTS, EmbeddingInput
from cirrus.service import EmbeddingRequest, EmbeddingResult

JSON_KINDS = (
    (bool, "a boolean"),
    (int | float, "a number"),
    (str, "a string"),
    (list, "a list"),
    (dict, "an object"),
)


def json_kind(value: Any) -> str:
    if value is None:
        return "null"
    return next((name for kind, name in JSON_KINDS if isinstance(value, kind)), type(value).__name__)


def texts_of(value: Any, field: str) -> EmbeddingInput:
    """A string, or a list of 1 to MAX_TEXTS non-empty strings; anything else is one clear InvalidInput."""
    if isinstance(value, str):
        return EmbeddingInput((_non_empty(value, field),), field)
    if not isinstance(value, list):
        raise InvalidInput(
            f"'{field}' must be a string or a list of strings, not {json_kind(value)}", param=field
        )
    if not value:
        raise InvalidInput(f"'{field}' is an empty list: send 1 to {MAX_TEXTS} strings", param=field)
    if len(value) > MAX_TEXTS:
        raise InvalidInput(
            f"'{field}' lists {len(value)} texts; at most {MAX_TEXTS} are allowed in one request", param=field
        )
    return EmbeddingInput(tuple(_text(item, f"{field}[{index}]") for index, item in enumerate(value)), field)


def _text(item: Any, where: str) -> str:
    if not isinstance(item, str):
        raise InvalidInput(f"'{where}' must be a string, not {json_kind(item)}", param=where)
    return _non_empty(item, where)


def _non_empty(text: str, where: str) -> str:
    if not text:
        raise InvalidInput(f"'{where}' is an empty string: there is nothing to embed", param=where)
    return text


async def embed(
    request: Request, model: str, inputs: EmbeddingInput, keep_alive_s: float | None
) -> EmbeddingResult:
    """`model` is the id the gateway resolved."""
    embedding = EmbeddingRequest(request_id_of(request), model, inputs, keep_alive_s)
    work = platform_of(request).pipeline.embed(gateway_call(request, stream=False), embedding)
    return await unless_disconnected(request, work)
