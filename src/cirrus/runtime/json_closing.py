"""The shortest text that closes what a JSON answer has left open, as its grammar allows.

JSON mode's grammar lets a small model write an object that never ends within `max_tokens`. The worker tracks
the answer through that grammar (`runtime.gbnf`) and, as the budget runs out, writes the closing this module
computes instead of sampling freely: `"` to end a string, `0` where a value is due, `":0` after a dangling key,
`}` and `]` for what is open. With a schema's grammar the same computation writes the required properties still
missing, each with its shortest value, in the order the grammar demands; the grammar is the only source of
truth, so the closing is always text the grammar sampler accepts.

Pure logic: the shortest text of every rule is found once per grammar (a fixpoint, as rules may recurse), then
a state's closing is the cheapest of its stacks' remainders. So is `growth`, the most one character can lengthen
a stack's closing: with it the worker knows, without computing closings, how far off the end of its budget is.
"""

from functools import lru_cache

from cirrus.runtime.gbnf import (
    TUPLE_WORDS,
    BoundedMemo,
    CharSet,
    Element,
    Grammar,
    GrammarState,
    Partial,
    Stack,
    parse_grammar,
)

# The character a terminal is closed with: a letter or a digit reads best and is one token everywhere.
PREFERRED = tuple(map(ord, "a0 "))
NO_CUT = Partial()


@lru_cache(maxsize=32)
def closing_for(grammar_text: str) -> "Closing":
    """The closings of a GBNF grammar, read once per grammar (JSON mode's is the same for every request)."""
    return Closing(parse_grammar(grammar_text))


class Closing:
    """Shortest closings in one grammar."""

    def __init__(self, grammar: Grammar) -> None:
        self.grammar = grammar
        self._rules = _shortest_rules(grammar)
        self._suffixes: dict[int, bytes | None] = {}
        self._stacks = BoundedMemo[Stack, bytes](_closing_words)
        # The most one character can lengthen any stack's closing, in bytes; None: no bound (always compute).
        self.growth = _character_growth(grammar, self._rules)

    def of(self, state: GrammarState) -> bytes | None:
        """The shortest bytes that take `state` to the grammar's end; None if nothing can (a dead state)."""
        if state.dead:
            return None
        if state.complete and state.partial.remain == 0:
            return b""
        texts = [self._stack(stack, state.partial) for stack in state.stacks if stack]
        found = [text for text in texts if text is not None]
        return min(found, key=len) if found else None

    def longest(self, state: GrammarState) -> int | None:
        """The longest closing any stack of `state` needs, a cut character counted as its shortest whole one:
        whichever stack survives the next characters, its closing grows from at most this. None: not known."""
        longest = 0
        for stack in filter(None, state.stacks):
            text = self._stack(stack, NO_CUT)
            if text is None:
                return None
            longest = max(longest, len(text))
        return longest

    def _stack(self, stack: Stack, partial: Partial) -> bytes | None:
        if partial.remain == 0 and (known := self._stacks.get(stack)) is not None:
            return known
        terminal = self.grammar.elements[stack[-1]]
        assert isinstance(terminal, CharSet)  # an expanded stack always ends at a terminal
        head = _representative(terminal) if partial.remain == 0 else _finish_character(terminal, partial)
        parts = [head, self._suffix(stack[-1] + 1), *(self._suffix(position) for position in stack[-2::-1])]
        whole = [part for part in parts if part is not None]
        text = b"".join(whole) if len(whole) == len(parts) else None
        if partial.remain == 0 and text is not None:
            self._stacks.put(stack, text)
        return text

    def _suffix(self, position: int) -> bytes | None:
        """The shortest text of an alternative's elements from `position` on."""
        if position not in self._suffixes:
            self._suffixes[position] = _sequence_text(self.grammar.elements, position, self._rules)
        return self._suffixes[position]


def _closing_words(stack: Stack, text: bytes) -> int:
    return len(stack) + TUPLE_WORDS + len(text) // 8 + TUPLE_WORDS


def _character_growth(grammar: Grammar, rules: list[bytes | None]) -> int | None:
    """The most one character can lengthen a stack's closing, the shortest texts of its positions.

    The character takes the terminal on top (a byte or more of closing), then what follows expands: a rule
    reference becomes one of its alternatives, perhaps longer than the rule's shortest text, and so on down a
    chain of first elements to the next terminal. The worst chain, less the byte taken, bounds the growth. None
    where some text cannot be closed at all, or a chain loops (left recursion, which llama.cpp refuses anyway)."""
    unclosable = (
        isinstance(element, CharSet) and _representative(element) is None for element in grammar.elements
    )
    if None in rules or any(unclosable):
        return None
    openings = _Openings(grammar, [len(rule or b"") for rule in rules])
    try:
        worst = max(map(openings.of, range(len(grammar.alternatives))), default=0)
    except (_ChainLoops, RecursionError):
        return None
    return max(worst - 1, 0)


class _ChainLoops(Exception):
    pass


class _Openings:
    """How much more than a rule's shortest text choosing one of its alternatives can cost a closing, with what
    that alternative's first elements may open in turn (a rule whose shortest text is empty may be passed over,
    adding nothing, to the element after it)."""

    def __init__(self, grammar: Grammar, best: list[int]) -> None:
        self._grammar = grammar
        self._best = best
        self._lengths = _suffix_lengths(grammar.elements, best)
        self._known: dict[int, int] = {}
        self._open: set[int] = set()

    def of(self, rule: int) -> int:
        if rule in self._known:
            return self._known[rule]
        if rule in self._open:
            raise _ChainLoops
        self._open.add(rule)
        worst = 0
        for start in self._grammar.alternatives[rule]:
            nested = max(map(self.of, self._first_references(start)), default=0)
            worst = max(worst, self._lengths[start] - self._best[rule] + nested)
        self._open.discard(rule)
        self._known[rule] = worst
        return worst

    def _first_references(self, start: int) -> list[int]:
        references = []
        position = start
        while isinstance(element := self._grammar.elements[position], int):
            references.append(element)
            if self._best[element]:
                break
            position += 1
        return references


def _suffix_lengths(elements: tuple[Element, ...], best: list[int]) -> list[int]:
    """The length of the shortest text of each alternative from each position on."""
    lengths = [0] * (len(elements) + 1)
    for position in reversed(range(len(elements))):
        element = elements[position]
        if element is not None:
            own = best[element] if isinstance(element, int) else len(_representative(element) or b"")
            lengths[position] = own + lengths[position + 1]
    return lengths


def _shortest_rules(grammar: Grammar) -> list[bytes | None]:
    best: list[bytes | None] = [None] * len(grammar.alternatives)
    changed = True
    while changed:
        changed = False
        for rule, starts in enumerate(grammar.alternatives):
            for start in starts:
                text = _sequence_text(grammar.elements, start, best)
                current = best[rule]
                if text is not None and (current is None or len(text) < len(current)):
                    best[rule], changed = text, True
    return best


def _sequence_text(elements: tuple[Element, ...], position: int, rules: list[bytes | None]) -> bytes | None:
    parts = []
    while (element := elements[position]) is not None:
        part = rules[element] if isinstance(element, int) else _representative(element)
        if part is None:
            return None
        parts.append(part)
        position += 1
    return b"".join(parts)


def _representative(terminal: CharSet) -> bytes | None:
    candidates = [*PREFERRED, *(low for low, _ in terminal.ranges), *(high for _, high in terminal.ranges)]
    for code in candidates:
        if 0 < code < 0x110000 and not 0xD800 <= code < 0xE000 and terminal.matches(code):
            return chr(code).encode("utf-8")
    return None


def _finish_character(terminal: CharSet, partial: Partial) -> bytes | None:
    """The continuation bytes that end a character a token left unfinished with one the terminal allows."""
    shift = 6 * partial.remain
    low = partial.value << shift
    high = low | ((1 << shift) - 1)
    for code in (high, low, (low + high) // 2):  # all 0xBF first: never a control character
        if terminal.matches(code):
            return bytes(0x80 | ((code >> (6 * k)) & 0x3F) for k in reversed(range(partial.remain)))
    return None
