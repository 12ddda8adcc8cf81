"""The generation options both protocols accept; each protocol's schema narrows the ranges it documents."""

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cirrus.api.keep_alive import check_keep_alive, parse_keep_alive
from cirrus.chat import ChatOptions, ChatRequest
from cirrus.runtime.params import SamplingParams


class RunOptions(BaseModel):
    """Workers AI's per-request options, sent as the body's `options` object."""

    model_config = ConfigDict(extra="ignore")

    rejectIfBusy: bool = Field(
        default=False, strict=True, description="refuse at once (429) rather than queue"
    )


class GenerationOptions(BaseModel):
    """Numbers and booleans are strict: "0.5" is not a temperature, true is not a max_tokens."""

    model_config = ConfigDict(extra="ignore")

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
    options: RunOptions | None = None

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_as_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("keep_alive", mode="before")
    @classmethod
    def _valid_keep_alive(cls, value: Any) -> Any:
        return check_keep_alive(value)

    def requested_max_tokens(self) -> int | None:
        return self.max_tokens

    def sampling(self, default_max_tokens: int) -> SamplingParams:
        return SamplingParams(
            max_tokens=self.requested_max_tokens() or default_max_tokens,
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

    def chat_request(
        self,
        model: str,
        messages: Sequence[Mapping[str, Any]] | None,
        options: ChatOptions,
        prompt: str | None = None,
        raw: bool = False,
    ) -> ChatRequest:
        """For the chat core, which fills in the model's default max_tokens."""
        max_tokens = self.requested_max_tokens()
        sampling = self.sampling(max_tokens or 1)
        busy = self.options is not None and self.options.rejectIfBusy
        return ChatRequest(
            model, messages, prompt, raw, options, sampling, max_tokens, self.keep_alive_s(), busy
        )
