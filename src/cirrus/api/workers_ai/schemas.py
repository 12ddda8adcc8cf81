"""Workers AI inputs (text generation, text embeddings), with the ranges Workers AI documents, and the result
envelope."""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from cirrus.api.embeddings import texts_of
from cirrus.api.keep_alive import check_keep_alive, parse_keep_alive
from cirrus.api.options import GenerationOptions
from cirrus.runtime.embedding import MAX_TEXTS, EmbeddingInput
from cirrus.runtime.params import GenerationInput

MAX_PROMPT_CHARS = 131072


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "tool"]
    content: str = Field(max_length=MAX_PROMPT_CHARS)


class TextGenerationInput(GenerationOptions):
    """`prompt` (optionally `raw`) or `messages`, plus sampling options, with Workers AI's ranges."""

    prompt: str | None = Field(default=None, min_length=1, max_length=MAX_PROMPT_CHARS)
    messages: list[ChatMessage] | None = Field(default=None, min_length=1)
    raw: bool = Field(default=False, strict=True)

    @model_validator(mode="after")
    def _prompt_or_messages(self) -> "TextGenerationInput":
        if self.prompt is not None and self.messages is not None:
            raise ValueError("send either 'prompt' or 'messages', not both")
        if self.prompt is None and self.messages is None:
            raise ValueError("'prompt' or 'messages' is required")
        return self

    def generation_input(self, default_max_tokens: int) -> GenerationInput:
        messages = tuple(m.model_dump(exclude_none=True) for m in self.messages) if self.messages else None
        sampling = self.sampling(default_max_tokens)
        return GenerationInput(prompt=self.prompt, messages=messages, raw=self.raw, sampling=sampling)


class TextEmbeddingsInput(BaseModel):
    """`text`: one string, or a list of up to 100; answered as {"shape": [n, dimensions], "data": [...]}."""

    model_config = ConfigDict(extra="ignore")

    text: str | list[str] = Field(
        description=f"a string, or a list of 1 to {MAX_TEXTS} strings",
        json_schema_extra={"maxItems": MAX_TEXTS},
    )
    keep_alive: float | str | None = Field(default=None, description="seconds, or a duration such as '5m'")
    stream: bool = Field(default=False, strict=True, description="not supported: embeddings come at once")

    @field_validator("stream")
    @classmethod
    def _not_streamed(cls, value: bool) -> bool:
        if value:
            raise ValueError("text-embeddings models answer at once; leave 'stream' out or send false")
        return value

    @field_validator("text", mode="plain")
    @classmethod
    def _texts(cls, value: Any) -> Any:
        texts_of(value, "text")  # raises InvalidInput naming the text at fault
        return value

    @field_validator("keep_alive", mode="before")
    @classmethod
    def _valid_keep_alive(cls, value: Any) -> Any:
        return check_keep_alive(value)

    def embedding_input(self) -> EmbeddingInput:
        return texts_of(self.text, "text")

    def keep_alive_s(self) -> float | None:
        return parse_keep_alive(self.keep_alive)


GENERATION_FIELDS = frozenset({"prompt", "messages"})
EMBEDDING_FIELDS = frozenset({"text"})


def envelope(result: Any) -> dict[str, Any]:
    return {"result": result, "success": True, "errors": [], "messages": []}
