"""Workers AI text-generation input, with the ranges Workers AI documents, and its result shape."""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cirrus.api.options import GenerationOptions
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


def envelope(result: Any) -> dict[str, Any]:
    return {"result": result, "success": True, "errors": [], "messages": []}
