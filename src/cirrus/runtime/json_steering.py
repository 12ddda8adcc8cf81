"""JSON mode within `max_tokens`: one sequence's answer tracked through its grammar and closed in time.

Each step the scheduler asks `choose` for the sequence's next token, with the tokens it has left. While the
budget is comfortable the sampler picks freely (the grammar still constrains it). Near the end each proposed
token is checked before the sampler is told of it: taken if the closing it leaves still fits, else the first
token of the current closing is written instead; and once the closing fills the budget it is written token by
token. Forced tokens go through the sampler's grammar and penalties like sampled ones, so its state stays the
text's. Invariant: the closing never needs more tokens than are left, so the answer ends as valid JSON whenever
the shortest valid answer fit at the start.
"""

import logging
from typing import Protocol, TypeVar

from cirrus.runtime.gbnf import GrammarState
from cirrus.runtime.json_closing import Closing

log = logging.getLogger(__name__)

# Tokens of slack above the closing's own length under which each token is checked before it is taken. Above
# it the sampler's single native call picks alone: no one token opens this much structure.
CHECK_MARGIN = 32
CACHE_ENTRIES = 4096


class TokenSampler(Protocol):
    def allows(self, token: int) -> bool: ...

    def accept(self, token: int) -> None: ...


SamplerIn = TypeVar("SamplerIn", bound=TokenSampler, contravariant=True)
SamplerT = TypeVar("SamplerT", bound=TokenSampler)


class Vocabulary(Protocol):
    n_vocab: int

    def piece(self, token: int) -> bytes: ...

    def is_end(self, token: int) -> bool: ...

    def tokenize(self, text: str, add_special: bool) -> list[int]: ...


class Engine(Vocabulary, Protocol[SamplerIn]):
    """What steering needs of `LlamaModel`."""

    def sample(self, sampler: SamplerIn, index: int) -> int: ...

    def propose(self, sampler: SamplerIn, index: int) -> int: ...


class ClosingTokens:
    """A closing's text as the model's tokens, checked to spell exactly that text; one per model."""

    def __init__(self, engine: Vocabulary) -> None:
        self._engine = engine
        self._known: dict[bytes, tuple[int, ...] | None] = {}
        self._bytes: dict[int, int] | None = None  # single-byte tokens, found when first needed

    def of(self, text: bytes) -> tuple[int, ...] | None:
        if text not in self._known:
            if len(self._known) >= CACHE_ENTRIES:
                self._known.clear()
            self._known[text] = self._spelled(text)
        return self._known[text]

    def _spelled(self, text: bytes) -> tuple[int, ...] | None:
        lead = len(text) - len(text.lstrip(bytes(range(0x80, 0xC0))))  # the end of an unfinished character
        head = [self._byte_token(byte) for byte in text[:lead]]
        rest = self._text_tokens(text[lead:].decode("utf-8"))
        if rest is None or any(token is None for token in head):
            return None
        return (*head, *rest)  # type: ignore[arg-type]

    def _text_tokens(self, text: str) -> tuple[int, ...] | None:
        whole = self._exact(text)
        if whole is not None:
            return whole
        pieces = [self._exact(char) for char in text]  # a tokenizer that would add a prefix space, say
        if any(piece is None for piece in pieces):
            return None
        return tuple(token for piece in pieces for token in piece)  # type: ignore[union-attr]

    def _exact(self, text: str) -> tuple[int, ...] | None:
        tokens = self._engine.tokenize(text, False) if text else []
        spelled = b"".join(self._engine.piece(token) for token in tokens)
        return tuple(tokens) if spelled == text.encode("utf-8") else None

    def _byte_token(self, byte: int) -> int | None:
        if self._bytes is None:
            self._bytes = {}
            for token in range(self._engine.n_vocab):
                piece = self._engine.piece(token)
                if len(piece) == 1 and not self._engine.is_end(token):
                    self._bytes.setdefault(piece[0], token)
        return self._bytes.get(byte)


class JsonSteering:
    def __init__(self, closing: Closing, tokens: ClosingTokens) -> None:
        self._closing = closing
        self._tokens = tokens
        self._state = GrammarState.initial(closing.grammar)
        self._writing: tuple[int, ...] | None = None  # the rest of a closing being forced
        self._lost = False  # the text left the grammar as read here: sample as if unsteered
        self.forced = False

    @property
    def complete(self) -> bool:
        """The answer is whole: the grammar allows nothing more but whitespace."""
        return self._state.only_whitespace_follows()

    @property
    def finish_reason(self) -> str:
        return "length" if self.forced else "stop"

    def choose(self, engine: Engine[SamplerT], sampler: SamplerT, index: int, remaining: int) -> int:
        closing = None if self._lost else self._closing_now()
        if closing is None:
            return self._sampled(engine, sampler, index)
        if len(closing) >= remaining:
            return self._force(engine, sampler, index, closing)
        if remaining - len(closing) > CHECK_MARGIN:
            return self._sampled(engine, sampler, index)
        return self._checked(engine, sampler, index, remaining, closing)

    def _sampled(self, engine: Engine[SamplerT], sampler: SamplerT, index: int) -> int:
        token = engine.sample(sampler, index)
        if not engine.is_end(token):
            self._move(self._state.feed(engine.piece(token)))
        return token

    def _checked(
        self,
        engine: Engine[SamplerT],
        sampler: SamplerT,
        index: int,
        remaining: int,
        closing: tuple[int, ...],
    ) -> int:
        token = engine.propose(sampler, index)
        if engine.is_end(token):
            return token  # the grammar allowed the end: the answer is whole
        after = self._state.feed(engine.piece(token))
        left = self._cost(after)
        if (left is not None and left < remaining) or not closing:  # nothing to close: the answer is whole
            sampler.accept(token)
            self._move(after)
            return token
        return self._force(engine, sampler, index, closing)

    def _force(
        self, engine: Engine[SamplerT], sampler: SamplerT, index: int, closing: tuple[int, ...]
    ) -> int:
        token = closing[0]
        if not sampler.allows(token):  # this grammar reading and llama.cpp's disagree: stop steering
            log.warning(
                "JSON mode's closing token %d is not one its grammar allows; closing abandoned", token
            )
            self._lost = True
            return self._sampled(engine, sampler, index)
        sampler.accept(token)
        self._move(self._state.feed(engine.piece(token)))
        self._writing, self.forced = closing[1:], True
        return token

    def _move(self, state: GrammarState) -> None:
        self._state, self._writing = state, None
        if state.dead:
            log.warning("JSON mode's answer left its grammar as read here; closing abandoned")
            self._lost = True

    def _closing_now(self) -> tuple[int, ...] | None:
        text = self._closing.of(self._state)
        fresh = None if text is None else self._tokens.of(text)
        writing = self._writing
        if writing is not None and (fresh is None or len(writing) <= len(fresh)):
            return writing
        return fresh

    def _cost(self, state: GrammarState) -> int | None:
        text = self._closing.of(state)
        tokens = None if text is None else self._tokens.of(text)
        return None if tokens is None else len(tokens)
