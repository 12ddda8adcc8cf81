"""The shortest text that closes what a JSON answer has left open, as its grammar allows.

JSON mode's grammar lets a small model write an object that never ends within `max_tokens`. The worker tracks
the answer through that grammar (`runtime.gbnf`) and, as the budget runs out, writes the closing this module
computes instead of sampling freely: `"` to end a string, `0` where a value is due, `":0` after a dangling key,
`}` and `]` for what is open. With a schema's grammar the same computation writes the required properties still
missing, each with its shortest value, in the order the grammar demands; the grammar is the only source of
truth, so the closing is always text the grammar sampler accepts.

Pure logic: the shortest text of every rule is found once per grammar (a fixpoint, as rules may recurse), then
a state's closing is the cheapest of its stacks' remainders.
"""

from functools import lru_cache

from cirrus.runtime.gbnf import CharSet, Element, Grammar, GrammarState, Partial, Stack, parse_grammar

# The character a terminal is closed with: a letter or a digit reads best and is one token everywhere.
PREFERRED = tuple(map(ord, "a0 "))


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
        self._stacks: dict[Stack, bytes | None] = {}

    def of(self, state: GrammarState) -> bytes | None:
        """The shortest bytes that take `state` to the grammar's end; None if nothing can (a dead state)."""
        if state.dead:
            return None
        if state.complete and state.partial.remain == 0:
            return b""
        texts = [self._stack(stack, state.partial) for stack in state.stacks if stack]
        found = [text for text in texts if text is not None]
        return min(found, key=len) if found else None

    def _stack(self, stack: Stack, partial: Partial) -> bytes | None:
        if partial.remain == 0 and stack in self._stacks:
            return self._stacks[stack]
        terminal = self.grammar.elements[stack[-1]]
        assert isinstance(terminal, CharSet)  # an expanded stack always ends at a terminal
        head = _representative(terminal) if partial.remain == 0 else _finish_character(terminal, partial)
        parts = [head, self._suffix(stack[-1] + 1), *(self._suffix(position) for position in stack[-2::-1])]
        whole = [part for part in parts if part is not None]
        text = b"".join(whole) if len(whole) == len(parts) else None
        if partial.remain == 0:
            self._stacks[stack] = text
        return text

    def _suffix(self, position: int) -> bytes | None:
        """The shortest text of an alternative's elements from `position` on."""
        if position not in self._suffixes:
            self._suffixes[position] = _sequence_text(self.grammar.elements, position, self._rules)
        return self._suffixes[position]


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
