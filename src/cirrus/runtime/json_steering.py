"""JSON mode within `max_tokens`: one sequence's answer tracked through its grammar and closed in time.

Each step the scheduler asks `choose` for the sequence's next token, with the tokens it has left. Each proposed
token is checked before the sampler is told of it: taken if the closing it leaves still fits, else the first
token of the current closing is written instead; and once the closing fills the budget it is written token by
token. Forced tokens go through the sampler's grammar and penalties like sampled ones, so its state stays the
text's. Invariant: the closing never needs more tokens than are left, so the answer ends as valid JSON whenever
the shortest valid answer fit at the start.

Checking is arithmetic while the budget is comfortable: a bound on the closing (the longest any stack needs, in
bytes, so in tokens) grows by the grammar's `growth` per byte taken, and the closing itself is computed only when
that bound comes near the tokens left. Computed closings cost time with the nesting, so a text nested deeper than
MAX_DEPTH is no longer steered.
"""

import logging
from typing import Protocol, TypeVar

from cirrus.runtime.gbnf import TUPLE_WORDS, BoundedMemo, GrammarState
from cirrus.runtime.json_closing import Closing

log = logging.getLogger(__name__)

# The longest grammar stack followed, in positions (JSON mode's grammar takes about two per open object or array
# and nests at most 64 deep). A schema's free-form values may nest deeper: the answer then runs unsteered.
MAX_DEPTH = 256
# A character cut by a token closes with up to three continuation bytes where `Closing.longest` counts one.
CUT_CHARACTER = 2


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
        self._known = BoundedMemo[bytes, tuple[int, ...]](_spelling_words)
        self._bytes: dict[int, int] | None = None  # single-byte tokens, found when first needed

    def of(self, text: bytes) -> tuple[int, ...] | None:
        """`text` as tokens, or None where the vocabulary cannot spell it exactly. Every token spells a byte or
        more, so there are never more tokens than bytes."""
        known = self._known.get(text)
        if known is None:
            known = self._spelled(text)
            if known is not None:
                self._known.put(text, known)
        return known

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
        self._bound: int | None = None  # the most tokens the state's closing may need; None: not known
        self._writing: tuple[int, ...] | None = None  # the rest of a closing being forced
        self._lost = False  # the text left the grammar as read here, or nests too deep: sample unsteered
        self.forced = False

    @property
    def complete(self) -> bool:
        """The answer is whole: the grammar allows nothing more but whitespace."""
        return self._state.only_whitespace_follows()

    @property
    def finish_reason(self) -> str:
        return "length" if self.forced else "stop"

    def choose(self, engine: Engine[SamplerT], sampler: SamplerT, index: int, remaining: int) -> int:
        if self._lost:
            return self._sampled(engine, sampler, index)
        if not _fits(self._bound, remaining):
            closing = self._closing_now()
            if closing is None:
                return self._sampled(engine, sampler, index)
            if len(closing) >= remaining:
                return self._force(engine, sampler, index, closing)
        return self._checked(engine, sampler, index, remaining)

    def _sampled(self, engine: Engine[SamplerT], sampler: SamplerT, index: int) -> int:
        token = engine.sample(sampler, index)
        if not self._lost and not engine.is_end(token):
            piece = engine.piece(token)
            self._move(self._state.feed(piece), self._grown(piece))
        return token

    def _checked(self, engine: Engine[SamplerT], sampler: SamplerT, index: int, remaining: int) -> int:
        token = engine.propose(sampler, index)
        if engine.is_end(token):
            return token  # the grammar allowed the end: the answer is whole
        piece = engine.piece(token)
        after, bound = self._state.feed(piece), self._grown(piece)
        if not _fits(bound, remaining):
            left, bound = self._measure(after)
            if left is None or len(left) >= remaining:
                closing = self._closing_now()
                if closing:  # else nothing to close (the answer is whole) or no closing to write: take it
                    return self._force(engine, sampler, index, closing)
        sampler.accept(token)
        self._move(after, bound)
        return token

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
        piece = engine.piece(token)
        self._move(self._state.feed(piece), self._grown(piece))
        self._writing, self.forced = closing[1:], True
        return token

    def _move(self, state: GrammarState, bound: int | None) -> None:
        self._state, self._bound, self._writing = state, bound, None
        if state.dead:
            log.warning("JSON mode's answer left its grammar as read here; closing abandoned")
            self._lost = True
        elif state.depth > MAX_DEPTH:
            log.warning("JSON mode's answer nests deeper than steering follows; closing abandoned")
            self._lost = True

    def _grown(self, piece: bytes) -> int | None:
        """The bound after `piece`: each of its characters (one byte at least) may add `growth`."""
        growth = self._closing.growth
        return None if self._bound is None or growth is None else self._bound + growth * len(piece)

    def _closing_now(self) -> tuple[int, ...] | None:
        fresh, self._bound = self._measure(self._state)
        writing = self._writing
        if writing is not None and (fresh is None or len(writing) <= len(fresh)):
            return writing
        return fresh

    def _measure(self, state: GrammarState) -> tuple[tuple[int, ...] | None, int | None]:
        """The closing of `state` as tokens, and the bound on it for what follows."""
        text = self._closing.of(state)
        tokens = None if text is None else self._tokens.of(text)
        longest = self._closing.longest(state)
        return tokens, None if longest is None else longest + CUT_CHARACTER


def _fits(bound: int | None, remaining: int) -> bool:
    """Whether a closing of at most `bound` tokens leaves room for the token being chosen."""
    return bound is not None and bound < remaining


def _spelling_words(text: bytes, tokens: tuple[int, ...]) -> int:
    return len(text) // 8 + len(tokens) + 2 * TUPLE_WORDS
