"""OpenAI request bodies, with OpenAI's ranges, plus Cirrus's extras (top_k, repetition_penalty, keep_alive)."""

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cirrus.api.keep_alive import parse_keep_alive
from cirrus.runtime.params import SamplingParams, Usage

MAX_PROMPT_CHARS = 131072


class StreamOptions(BaseModel):
    include_usage: bool = False


class SamplingFields(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1, le=131072)
    temperature: float = Field(default=1.0, ge=0, le=2)
    top_p: float = Field(default=1.0, ge=0, le=1)
    top_k: int = Field(default=40, ge=1, le=50)
    n: int = Field(default=1, ge=1, le=1, description="only 1 is supported")
    seed: int | None = None
    stop: list[str] | None = Field(default=None, max_length=16)
    frequency_penalty: float = Field(default=0.0, ge=-2, le=2)
    presence_penalty: float = Field(default=0.0, ge=-2, le=2)
    repetition_penalty: float = Field(default=1.0, ge=0, le=2)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    keep_alive: float | str | None = None

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_as_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("keep_alive")
    @classmethod
    def _valid_keep_alive(cls, value: float | str | None) -> float | str | None:
        parse_keep_alive(value)
        return value

    def sampling(self, default_max_tokens: int) -> SamplingParams:
        return SamplingParams(
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

    def keep_alive_s(self) -> float | None:
        return parse_keep_alive(self.keep_alive)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        return "".join(str(part.get("text", "")) for part in self.content if part.get("type") == "text")


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=131072)

    def chat_messages(self) -> tuple[dict[str, Any], ...]:
        role = {"developer": "system"}
        return tuple({"role": role.get(m.role, m.role), "content": m.text()} for m in self.messages)

    def sampling(self, default_max_tokens: int) -> SamplingParams:
        params = super().sampling(default_max_tokens)
        if self.max_completion_tokens is not None and self.max_tokens is None:
            return SamplingParams(**{**params.__dict__, "max_tokens": self.max_completion_tokens})
        return params


class CompletionRequest(SamplingFields):
    prompt: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    echo: bool = False


def usage_dict(usage: Usage) -> dict[str, int]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }


def response_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


def finish_reason(reason: str) -> str:
    return reason if reason in ("stop", "length") else "stop"
