"""What a request may cost, known before it runs: the amount a budget reserves at admission.

The prompt's tokens are not known until the worker tokenizes it, so they are estimated from its characters
(English text runs about four characters a token) plus an allowance for what a chat template adds (role markers,
a short default system prompt). The completion is bounded by `max_tokens`, which dominates a typical estimate.
An estimate is only held while the request runs: the request is then metered at its real cost.
"""

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from cirrus.catalog.spec import ModelSpec
from cirrus.metering.neurons import price
from cirrus.runtime.params import GenerationInput

CHARS_PER_TOKEN = 4.0
PROMPT_OVERHEAD_TOKENS = 32


@dataclass(frozen=True)
class Estimate:
    cost_usd: float
    neurons: float


NOTHING = Estimate(0.0, 0.0)


@dataclass(frozen=True)
class TokenEstimator:
    chars_per_token: float = CHARS_PER_TOKEN
    overhead_tokens: int = PROMPT_OVERHEAD_TOKENS

    def tokens(self, chars: int) -> int:
        return math.ceil(chars / self.chars_per_token) + self.overhead_tokens

    def generation(self, spec: ModelSpec, inputs: GenerationInput, chars: int | None = None) -> Estimate:
        """The prompt's estimated tokens and `max_tokens`, each capped by the context window, at `spec`'s price;
        `chars` when the caller already counted the prompt (it is the same for every model of a chain)."""
        counted = prompt_chars(inputs) if chars is None else chars
        prompt = min(self.tokens(counted), spec.context_window)
        completion = min(inputs.sampling.max_tokens, spec.context_window)
        return Estimate(*price(spec, prompt, completion, 0))

    def embedding(self, spec: ModelSpec, texts: Sequence[str]) -> Estimate:
        tokens = sum(min(self.tokens(len(text)), spec.context_window) for text in texts)
        return Estimate(*price(spec, tokens, 0, 0))


def prompt_chars(inputs: GenerationInput) -> int:
    """The characters the model will read: the prompt, or the messages and tools as JSON (whose keys and quotes
    stand in for the template's own markup)."""
    chars = len(inputs.prompt or "")
    if inputs.messages is not None:
        chars += len(json.dumps(list(inputs.messages), ensure_ascii=False, default=str))
    if inputs.tools is not None:
        chars += len(json.dumps(list(inputs.tools), ensure_ascii=False, default=str))
    return chars
