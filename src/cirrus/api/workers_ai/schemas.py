"""Workers AI text-generation input, with the ranges Workers AI documents, and its result shape."""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from cirrus.api.keep_alive import check_keep_alive, parse_keep_alive
from cirrus.runtime.params import GenerationInput, SamplingParams

MAX_PROMPT_CHARS = 131072


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "tool"]
    content: str = Field(max_length=MAX_PROMPT_CHARS)


class TextGenerationInput(BaseModel):
    """`prompt` (optionally `raw`) or `messages`, plus sampling options.

    Numbers and booleans are strict, as in Workers AI's JSON schemas: "0.5" is not a temperature, true is not a
    max_tokens, "yes" is not a stream flag."""

    model_config = ConfigDict(extra="ignore")

    prompt: str | None = Field(default=None, min_length=1, max_length=MAX_PROMPT_CHARS)
    messages: list[ChatMessage] | None = Field(default=None, min_length=1)
    raw: bool = Field(default=False, strict=True)
    stream: bool = Field(default=False, strict=True)
    max_tokens: int | None = Field(default=None, ge=1, le=131072, strict=True)
    temperature: float = Field(default=0.6, ge=0, le=5, strict=True)
    top_p: float = Field(default=1.0, ge=0, le=2, strict=True)
    top_k: int = Field(default=40, ge=1, le=50, strict=True)
    seed: int | None = Field(default=None, ge=0, le=9999999999, strict=True)
    repetition_penalty: float = Field(default=1.0, ge=0, le=2, strict=True)
    frequency_penalty: float = Field(default=0.0, ge=0, le=2, strict=True)
    presence_penalty: float = Field(default=0.0, ge=0, le=2, strict=True)
    stop: list[str] | None = Field(default=None, max_length=16)
    keep_alive: float | str | None = Field(default=None, description="seconds, or a duration such as '5m'")

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_as_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("keep_alive", mode="before")
    @classmethod
    def _valid_keep_alive(cls, value: Any) -> Any:
        return check_keep_alive(value)

    @model_validator(mode="after")
    def _prompt_or_messages(self) -> "TextGenerationInput":
        if self.prompt is not None and self.messages is not None:
            raise ValueError("send either 'prompt' or 'messages', not both")
        if self.prompt is None and self.messages is None:
            raise ValueError("'prompt' or 'messages' is required")
        return self

    def generation_input(self, default_max_tokens: int) -> GenerationInput:
        sampling = SamplingParams(
            max_tokens=self.max_tokens or default_max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            seed=self.seed,
            repetition_penalty=self.repetition_penalty,
            frequency_penalty=self.frequency_penalty,
            presence_penalty=self.presence_penalty,
            stop=tuple(self.stop or ()),
        )
        messages = tuple(m.model_dump(exclude_none=True) for m in self.messages) if self.messages else None
        return GenerationInput(prompt=self.prompt, messages=messages, raw=self.raw, sampling=sampling)

    def keep_alive_s(self) -> float | None:
        return parse_keep_alive(self.keep_alive)


def envelope(result: Any) -> dict[str, Any]:
    return {"result": result, "success": True, "errors": [], "messages": []}
