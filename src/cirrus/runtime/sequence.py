"""One generation running in a slot of a batched engine."""

from dataclasses import dataclass, field

from cirrus.runtime.llama import Sampler
from cirrus.runtime.params import SamplingParams
from cirrus.runtime.textstream import StopMatcher, Utf8Assembler


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
