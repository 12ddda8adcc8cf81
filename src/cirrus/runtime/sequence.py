"""One generation running in a slot of a batched engine."""

from dataclasses import dataclass, field

from cirrus.runtime.json_steering import JsonSteering
from cirrus.runtime.llama import Sampler
from cirrus.runtime.params import SamplingParams
from cirrus.runtime.textstream import StopMatcher, Utf8Assembler


@dataclass(frozen=True)
class ThinkingMarkers:
    """The single tokens a model opens and closes its reasoning with (`<think>`, `</think>`)."""

    open: int
    close: int


@dataclass
class ReasoningCounter:
    """Counts the completion tokens written inside the thinking markers, the markers themselves excluded."""

    markers: ThinkingMarkers | None
    thinking: bool = False  # the prompt may already have opened the reasoning (GLM-4.7)
    tokens: int = 0

    def see(self, token: int) -> None:
        if self.markers is None:
            return
        if token == self.markers.open:
            self.thinking = True
        elif token == self.markers.close:
            self.thinking = False
        elif self.thinking:
            self.tokens += 1


@dataclass
class Sequence:
    request_id: str
    slot: int
    prompt: list[int]
    sampling: SamplingParams
    sampler: Sampler
    budget: int
    cached: int
    fed: int
    next_token: int | None = None
    completion_tokens: int = 0
    finish_reason: str | None = None
    reasoning: ReasoningCounter = field(default_factory=lambda: ReasoningCounter(None))
    steering: JsonSteering | None = None  # JSON mode: closes the answer before the budget runs out
    background: bool = False  # batch work: paused while an interactive prompt is evaluated
    adapter: str | None = None  # the LoRA adapter's path: only sequences with the same one decode together
    matcher: StopMatcher = field(init=False)
    utf8: Utf8Assembler = field(default_factory=Utf8Assembler)

    def __post_init__(self) -> None:
        self.matcher = StopMatcher(self.sampling.stop)

    @property
    def prefilling(self) -> bool:
        return self.fed < len(self.prompt)

    def text_for(self, piece: bytes) -> str:
        return self.matcher.feed(self.utf8.feed(piece))

    def tail(self) -> str:
        return self.matcher.feed(self.utf8.flush()) + self.matcher.flush()
