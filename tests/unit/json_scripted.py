"""A scripted model for JSON mode's steering (`runtime.json_steering`): a vocabulary of a few hundred pieces, a
sampler whose grammar refuses what llama.cpp's would, and a model whose only wish is to keep writing. The
grammar here stands in for llama.cpp's: the real pairing is proven by the integration tests."""

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cirrus.runtime.gbnf import GrammarState, parse_grammar
from cirrus.runtime.json_closing import Closing, closing_for
from cirrus.runtime.json_steering import ClosingTokens, JsonSteering, TokenSampler

END = 0
PIECES = [
    b"",
    b"\n",
    *(bytes([c]) for c in range(0x20, 0x7F)),
    *(bytes([c]) for c in range(0x80, 0x100)),
    b'{"',
    b'":',
    b'": "',
    b'", "',
    b'"}',
    b"}}",
    b"]}",
    b"\n  ",
    b"null",
    b"true",
    b'[{"',
    b"[[[[",
    b'{"a":{"b":{"c":[',
    "é".encode(),
    "😀".encode()[:2],
    "😀".encode()[2:],
    b"hello",
    b" world",
    b"12345",
    b"address",
    b'": {"',
]


class GrammarSampler:
    """Stands in for llama.cpp's sampler chain: its grammar refuses what the grammar forbids, and accepting a
    refused token fails loudly, as llama.cpp would abort."""

    def __init__(self, grammar_text: str) -> None:
        self.state = GrammarState.initial(parse_grammar(grammar_text))

    def allows(self, token: int) -> bool:
        if token == END:
            return self.state.complete
        return not self.state.feed(PIECES[token]).dead

    def accept(self, token: int) -> None:
        assert self.allows(token), f"the grammar refuses {PIECES[token]!r}"
        if token != END:
            self.state = self.state.feed(PIECES[token])


@dataclass
class ScriptedModel:
    """Prefers the tokens `wish` ranks first; never wants to stop unless told to."""

    wish: Callable[[int], list[int]]
    steps: int = 0
    proposed: list[int] = field(default_factory=list)
    n_vocab: int = len(PIECES)

    def propose(self, sampler: TokenSampler, index: int) -> int:
        self.steps += 1
        token = next(t for t in self.wish(self.steps) if sampler.allows(t))
        self.proposed.append(token)
        return token

    def sample(self, sampler: TokenSampler, index: int) -> int:
        token = self.propose(sampler, index)
        sampler.accept(token)
        return token

    def piece(self, token: int) -> bytes:
        return PIECES[token]

    def is_end(self, token: int) -> bool:
        return token == END

    def tokenize(self, text: str, add_special: bool) -> list[int]:
        data, tokens = text.encode(), []
        while data:
            token = max(
                range(1, len(PIECES)), key=lambda t: len(PIECES[t]) if data.startswith(PIECES[t]) else -1
            )
            tokens.append(token)
            data = data[len(PIECES[token]) :]
        return tokens


def run(
    grammar: str,
    model: ScriptedModel,
    budget: int,
    closing: Closing | None = None,
    sampler: TokenSampler | None = None,
) -> tuple[bytes, str]:
    """What the scheduler does: one token per step until the end, the budget, or a whole answer."""
    steering = JsonSteering(closing or closing_for(grammar), ClosingTokens(model))
    sampler, text = sampler or GrammarSampler(grammar), b""
    for used in range(budget):
        token = steering.choose(model, sampler, 0, budget - used)
        if model.is_end(token):
            return text, "stop"
        text += model.piece(token)
        if steering.complete:
            return text, steering.finish_reason
    return text, "length"


def ranked(*pieces: bytes) -> Callable[[int], list[int]]:
    order = [PIECES.index(piece) for piece in pieces]
    return lambda step: [*order, *range(1, len(PIECES))]


def shuffled(seed: int) -> Callable[[int], list[int]]:
    rng = random.Random(seed)

    def wish(step: int) -> list[int]:
        tokens = list(range(1, len(PIECES)))
        rng.shuffle(tokens)
        return tokens

    return wish


def shortest_answer_tokens(grammar: str) -> int:
    closing = closing_for(grammar).of(GrammarState.initial(closing_for(grammar).grammar))
    tokens = ClosingTokens(ScriptedModel(shuffled(0))).of(closing or b"")
    assert tokens is not None
    return len(tokens)


def random_value(rng: random.Random, depth: int) -> Any:
    kinds: list[Callable[[], Any]] = [
        lambda: rng.randint(-1000, 1000),
        lambda: round(rng.uniform(-10, 10), rng.randint(0, 6)),
        lambda: random_text(rng),
        lambda: rng.choice([True, False, None]),
    ]
    if depth > 0:
        kinds.append(lambda: [random_value(rng, depth - 1) for _ in range(rng.randint(0, 3))])
        kinds.append(lambda: {f"k{i}": random_value(rng, depth - 1) for i in range(rng.randint(0, 3))})
    return rng.choice(kinds)()


def random_text(rng: random.Random) -> str:
    return "".join(rng.choice('ab "\\/é✓😀\t') for _ in range(rng.randint(0, 6)))
