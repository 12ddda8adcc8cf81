"""What one generation asks of an engine: protocol-neutral, sent to the worker as a frame."""

from dataclasses import asdict, dataclass, field
from typing import Any

ChatMessage = dict[str, Any]


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 256
    temperature: float = 0.6
    top_p: float = 1.0
    top_k: int = 40
    seed: int | None = None
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    stop: tuple[str, ...] = ()
    grammar: str | None = None  # GBNF the output must follow (JSON mode, tool calls); root rule "root"
    json_mode: bool = (
        False  # the grammar writes JSON (JSON mode, prompted tool calls): closed before max_tokens
    )


@dataclass(frozen=True)
class GenerationInput:
    """Either a prompt (raw or wrapped in the chat template) or a list of chat messages.

    `family` names the chat format (cirrus.families) that renders the messages, with `tools` and
    `enable_thinking` passed to its template; without one the model's own template renders the messages as sent.
    `background` marks batch work: the worker pauses it for the steps that evaluate an interactive prompt.
    `adapter` is the path of a LoRA adapter (GGUF) applied to this generation, content-addressed by the store.
    """

    prompt: str | None = None
    messages: tuple[ChatMessage, ...] | None = None
    raw: bool = False
    sampling: SamplingParams = field(default_factory=SamplingParams)
    family: str | None = None
    tools: tuple[dict[str, Any], ...] | None = None
    enable_thinking: bool | None = None
    background: bool = False
    adapter: str | None = None

    def to_frame(self) -> dict[str, Any]:
        frame = asdict(self)
        frame["messages"] = list(self.messages) if self.messages is not None else None
        frame["tools"] = list(self.tools) if self.tools is not None else None
        frame["sampling"]["stop"] = list(self.sampling.stop)
        return frame

    @classmethod
    def from_frame(cls, frame: dict[str, Any]) -> "GenerationInput":
        sampling = dict(frame["sampling"])
        sampling["stop"] = tuple(sampling.get("stop") or ())
        messages = frame.get("messages")
        tools = frame.get("tools")
        return cls(
            prompt=frame.get("prompt"),
            messages=tuple(messages) if messages is not None else None,
            raw=bool(frame.get("raw", False)),
            sampling=SamplingParams(**sampling),
            family=frame.get("family"),
            tools=tuple(tools) if tools is not None else None,
            enable_thinking=frame.get("enable_thinking"),
            background=bool(frame.get("background", False)),
            adapter=frame.get("adapter"),
        )


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    reasoning_tokens: int = 0  # completion tokens written between the model's thinking markers

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens
