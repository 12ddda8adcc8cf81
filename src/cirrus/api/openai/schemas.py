"""OpenAI request bodies, with OpenAI's ranges, plus Cirrus's extras (top_k, repetition_penalty, keep_alive)."""

import time
import uuid
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
)
from pydantic.json_schema import SkipJsonSchema

from cirrus.api.options import GenerationOptions
from cirrus.chat.options import ChatOptions, chat_options

MAX_PROMPT_CHARS = 131072
CARRIED_FIELDS = ("tool_calls", "tool_call_id", "name", "reasoning_content")


class StreamOptions(BaseModel):
    include_usage: bool = Field(default=False, strict=True)


class SamplingFields(GenerationOptions):
    """Generation options with OpenAI's ranges, plus Cirrus's extras (top_k, repetition_penalty, keep_alive)."""

    model: str = Field(min_length=1)
    temperature: float = Field(default=1.0, ge=0, le=2, strict=True)
    top_p: float = Field(default=1.0, ge=0, le=1, strict=True)
    n: int = Field(default=1, ge=1, le=1, strict=True, description="only 1 is supported")
    seed: int | None = Field(default=None, strict=True)
    frequency_penalty: float = Field(default=0.0, ge=-2, le=2, strict=True)
    presence_penalty: float = Field(default=0.0, ge=-2, le=2, strict=True)
    stream_options: StreamOptions | None = None
    user: str | None = None

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None

    @field_validator("content", mode="wrap")
    @classmethod
    def _valid_content(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """One error naming 'content', rather than one per member of its union."""
        try:
            content = handler(value)
        except ValidationError:
            raise ValueError("content must be a string, a list of content parts, or null") from None
        if isinstance(content, str) and len(content) > MAX_PROMPT_CHARS:
            raise ValueError(f"content must be at most {MAX_PROMPT_CHARS} characters")
        return content

    def text(self) -> str:
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        return "".join(str(part.get("text", "")) for part in self.content if part.get("type") == "text")

    def chat_message(self) -> dict[str, Any]:
        """Role and text, plus the tool-call fields a conversation with tools carries."""
        role = {"developer": "system"}.get(self.role, self.role)
        message: dict[str, Any] = {"role": role, "content": self.text()}
        extra = self.model_extra or {}
        for key in CARRIED_FIELDS:
            if extra.get(key) is not None:
                message[key] = extra[key]
        return message


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=131072, strict=True)
    prompt: SkipJsonSchema[Any] = Field(default=None, exclude=True)

    @field_validator("prompt")
    @classmethod
    def _no_prompt(cls, value: Any) -> None:
        if value is not None:
            raise ValueError(
                "chat completions take 'messages', not 'prompt' (send a prompt to /v1/completions)"
            )

    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None  # accepted; a model without a native format makes one call a turn
    response_format: dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] | None = None

    def chat_messages(self) -> tuple[dict[str, Any], ...]:
        return tuple(m.chat_message() for m in self.messages)

    def chat_options(self) -> ChatOptions:
        thinking = (self.chat_template_kwargs or {}).get("enable_thinking")
        return chat_options(self.tools, self.tool_choice, self.response_format, thinking, self.stream)

    def requested_max_tokens(self) -> int | None:
        return self.max_tokens or self.max_completion_tokens


class CompletionRequest(SamplingFields):
    prompt: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    echo: bool = Field(default=False, strict=True)
    messages: SkipJsonSchema[Any] = Field(default=None, exclude=True)

    @field_validator("messages")
    @classmethod
    def _no_messages(cls, value: Any) -> None:
        if value is not None:
            raise ValueError(
                "completions take 'prompt', not 'messages' (send messages to /v1/chat/completions)"
            )


def response_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


def finish_reason(reason: str) -> str:
    return reason if reason in ("stop", "length") else "stop"
