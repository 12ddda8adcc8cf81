"""POST /v1/embeddings. The openai SDK asks for base64 unless told otherwise: little-endian float32 values."""

import base64
from array import array
from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator

from cirrus.api.embeddings import embed, texts_of
from cirrus.api.inference import resolve_model
from cirrus.api.keep_alive import check_keep_alive, parse_keep_alive
from cirrus.api.path_parameters import account_parameter
from cirrus.runtime.embedding import MAX_TEXTS, EmbeddingInput
from cirrus.service import EmbeddingResult

router = APIRouter(tags=["OpenAI"])


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    input: str | list[str] = Field(
        description=f"a string, or a list of 1 to {MAX_TEXTS} strings (token arrays are not supported)"
    )
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: None = Field(default=None, description="not supported: embeddings keep the model's own size")
    user: str | None = None
    keep_alive: float | str | None = Field(default=None, description="seconds, or a duration such as '5m'")

    @field_validator("input", mode="plain")
    @classmethod
    def _texts(cls, value: Any) -> Any:
        texts_of(value, "input")  # raises InvalidInput naming the text at fault
        return value

    @field_validator("dimensions", mode="plain")
    @classmethod
    def _no_dimensions(cls, value: Any) -> None:
        if value is not None:
            raise ValueError("not supported: embeddings keep the model's own size; leave 'dimensions' out")
        return None

    @field_validator("keep_alive", mode="before")
    @classmethod
    def _valid_keep_alive(cls, value: Any) -> Any:
        return check_keep_alive(value)

    def embedding_input(self) -> EmbeddingInput:
        return texts_of(self.input, "input")


def _encoded(vector: list[float], encoding: str) -> list[float] | str:
    if encoding == "float":
        return vector
    values = array("f", vector)
    if values.itemsize != 4:  # pragma: no cover - every platform Python runs on has 4-byte floats
        raise RuntimeError("float32 arrays are not 4 bytes here")
    return base64.b64encode(values.tobytes()).decode("ascii")


def embeddings_body(body: EmbeddingRequest, model: str, result: EmbeddingResult) -> dict[str, Any]:
    """The embeddings of `body`'s texts by `model` (the resolved id), as the route answers them and a batch's
    output file carries them."""
    data = [
        {"object": "embedding", "index": index, "embedding": _encoded(vector, body.encoding_format)}
        for index, vector in enumerate(result.vectors)
    ]
    tokens = result.usage.prompt_tokens
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


async def embeddings(body: EmbeddingRequest, request: Request) -> Any:
    spec = resolve_model(request, body.model, stream=False)
    result = await embed(request, spec.id, body.embedding_input(), parse_keep_alive(body.keep_alive))
    return embeddings_body(body, spec.id, result)


for _prefix in ("/v1", "/client/v4/accounts/{account_id}/ai/v1"):
    router.add_api_route(
        f"{_prefix}/embeddings",
        embeddings,
        methods=["POST"],
        summary="Create embeddings (OpenAI)",
        openapi_extra=account_parameter(_prefix),
    )
