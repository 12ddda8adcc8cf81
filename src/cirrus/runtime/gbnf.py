"""A GBNF grammar read the way llama.cpp reads it, and a recogniser that follows a text through it.

The worker steers JSON mode towards a closing it can afford (`runtime.json_closing`); to know what is open it
tracks the text generated so far through the very grammar llama.cpp's sampler applies. The parse mirrors
llama.cpp's `llama_grammar_parser` (repetitions expand into helper rules the same way) and the recogniser its
pushdown stacks (`llama_grammar_advance_stack`, `llama_grammar_accept`), so both agree on every prefix.

Rules are flattened as llama.cpp keeps them: each alternative is a run of elements ended by None; a position is
an index into that run; a stack is a tuple of positions whose last is the terminal to match next.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

Stack = tuple[int, ...]
MAX_REPETITION = 2000  # llama.cpp's MAX_REPETITION_THRESHOLD: a larger bound means "no bound"


class GrammarSyntaxError(ValueError):
    pass


@dataclass(frozen=True)
class CharSet:
    """One terminal: code point ranges, or their complement; `any` is `.`."""

    ranges: tuple[tuple[int, int], ...]
    negated: bool = False
    any: bool = False

    def matches(self, code: int) -> bool:
        if self.any:
            return True
        return any(low <= code <= high for low, high in self.ranges) != self.negated

    def may_match(self, partial: "Partial") -> bool:
        """Whether some end of a partly written character could match: llama_grammar_match_partial_char."""
        if partial.remain < 0 or (partial.remain == 1 and partial.value < 2):
            return False  # not UTF-8, or an overlong 7-bit character
        shift = 6 * partial.remain
        low = partial.value << shift
        high = low | ((1 << shift) - 1)
        if low == 0:
            low = {2: 1 << 11, 3: 1 << 16}.get(partial.remain, low)
        if self.any:
            return True
        return any(lo <= high and low <= hi for lo, hi in self.ranges) != self.negated

    def only_whitespace(self) -> bool:
        return (
            not self.any
            and not self.negated
            and all(low == high and low in WHITESPACE for low, high in self.ranges)
        )


WHITESPACE = frozenset(map(ord, " \t\n\r"))
Element = CharSet | int | None  # a terminal, a rule reference, or the end of an alternative


# What one memo may hold, in machine words (a stack of n positions: n + TUPLE_WORDS). Keys grow with the
# nesting of the text, so a bound on entries alone bounds nothing: 2**18 words is about 4 MB in CPython.
MEMO_WORDS = 1 << 18
TUPLE_WORDS = 8  # a tuple's header, its entry in the memo's table, and its share of the key

Key = TypeVar("Key")
Value = TypeVar("Value")


class BoundedMemo(Generic[Key, Value]):
    """A memo that starts over once what it holds passes `budget` words (a deep text, or a schema with many
    distinct paths, would otherwise grow it without end in a worker that lives for days)."""

    def __init__(self, size: Callable[[Key, Value], int], budget: int = MEMO_WORDS) -> None:
        self._size = size
        self._budget = budget
        self._entries: dict[Key, Value] = {}
        self.words = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Key) -> Value | None:
        return self._entries.get(key)

    def put(self, key: Key, value: Value) -> Value:
        size = self._size(key, value)
        if self.words + size > self._budget:
            self._entries.clear()
            self.words = 0
        self._entries[key] = value
        self.words += size
        return value


def stack_words(stacks: tuple[Stack, ...]) -> int:
    return sum(len(stack) for stack in stacks) + TUPLE_WORDS * (len(stacks) + 1)


class Grammar:
    """Rules in llama.cpp's flat form. Expanding and accepting are pure, so their results are memoised: the
    same few stacks recur at every character of a string or a number."""

    def __init__(
        self, elements: tuple[Element, ...], alternatives: tuple[tuple[int, ...], ...], root: int
    ) -> None:
        self.elements = elements
        self.alternatives = alternatives  # per rule, where each alternative starts in `elements`
        self.root = root
        self._expanded = BoundedMemo[Stack, tuple[Stack, ...]](
            lambda stack, stacks: stack_words((stack,)) + stack_words(stacks)
        )
        self._accepted = BoundedMemo[tuple[tuple[Stack, ...], int], tuple[Stack, ...]](
            lambda key, stacks: stack_words(key[0]) + stack_words(stacks)
        )

    def start(self) -> tuple[Stack, ...]:
        stacks: dict[Stack, None] = {}
        for first in self.alternatives[self.root]:
            stacks.update(dict.fromkeys(self.expand((first,) if self.elements[first] is not None else ())))
        return tuple(stacks)

    def expand(self, stack: Stack) -> tuple[Stack, ...]:
        """Every way to reach a terminal (or the end) from `stack`: llama_grammar_advance_stack."""
        known = self._expanded.get(stack)
        return self._expanded.put(stack, self._expand(stack)) if known is None else known

    def accept(self, stacks: tuple[Stack, ...], code: int) -> tuple[Stack, ...]:
        """The stacks after one code point: llama_grammar_accept."""
        known = self._accepted.get((stacks, code))
        return self._accepted.put((stacks, code), self._accept(stacks, code)) if known is None else known

    def _expand(self, stack: Stack) -> tuple[Stack, ...]:
        elements, done, todo, seen = self.elements, dict[Stack, None](), [stack], set[Stack]()
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            reference = elements[current[-1]] if current else None
            if not isinstance(reference, int):
                done[current] = None
                continue
            position = current[-1]
            rest = current[:-1] if elements[position + 1] is None else (*current[:-1], position + 1)
            for first in self.alternatives[reference]:
                todo.append((*rest, first) if elements[first] is not None else rest)
        return tuple(done)

    def _accept(self, stacks: tuple[Stack, ...], code: int) -> tuple[Stack, ...]:
        after: dict[Stack, None] = {}
        for stack in stacks:
            if not stack:
                continue
            position = stack[-1]
            terminal = self.elements[position]
            if isinstance(terminal, CharSet) and terminal.matches(code):
                rest = stack[:-1] if self.elements[position + 1] is None else (*stack[:-1], position + 1)
                after.update(dict.fromkeys(self.expand(rest)))
        return tuple(after)


def parse_grammar(text: str, root: str = "root") -> Grammar:
    return _Parser(text).grammar(root)


class _Parser:
    def __init__(self, text: str) -> None:
        self._text = text
        self._pos = 0
        self._ids: dict[str, int] = {}
        self._rules: dict[int, list[list[Element]]] = {}

    def grammar(self, root: str) -> Grammar:
        self._space(newlines=True)
        while self._pos < len(self._text):
            self._rule()
        if root not in self._ids:
            raise GrammarSyntaxError(f"no rule named {root}")
        missing = [name for name, rule_id in self._ids.items() if rule_id not in self._rules]
        if missing:
            raise GrammarSyntaxError(f"undefined rules: {', '.join(missing)}")
        return self._flattened(self._ids[root])

    def _flattened(self, root: int) -> Grammar:
        elements: list[Element] = []
        alternatives: list[tuple[int, ...]] = []
        for rule_id in range(len(self._ids)):
            starts = []
            for alternative in self._rules[rule_id]:
                starts.append(len(elements))
                elements.extend(alternative)
                elements.append(None)
            alternatives.append(tuple(starts))
        return Grammar(tuple(elements), tuple(alternatives), root)

    # -- rules ------------------------------------------------------------------------------------------------

    def _rule(self) -> None:
        name = self._name()
        self._space(newlines=False)
        if not self._text.startswith("::=", self._pos):
            raise GrammarSyntaxError(f"expecting ::= at {self._pos}")
        self._pos += 3
        self._space(newlines=True)
        self._rules[self._id(name)] = self._alternates(name, nested=False)
        if self._pos < len(self._text) and self._text[self._pos] not in "\r\n":
            raise GrammarSyntaxError(f"expecting newline or end at {self._pos}")
        self._space(newlines=True)

    def _alternates(self, name: str, nested: bool) -> list[list[Element]]:
        alternatives = [self._sequence(name, nested)]
        while self._peek() == "|":
            self._pos += 1
            self._space(newlines=True)
            alternatives.append(self._sequence(name, nested))
        return alternatives

    def _sequence(self, name: str, nested: bool) -> list[Element]:
        sequence: list[Element] = []
        last: list[Element] = []  # the symbol a repetition operator applies to
        while self._pos < len(self._text):
            char = self._text[self._pos]
            if char == '"':
                last = list(self._literal())
            elif char == "[":
                last = [self._char_class()]
            elif _is_word(char):
                last = [self._id(self._name())]
            elif char == "(":
                self._pos += 1
                self._space(newlines=True)
                group = self._fresh(name)
                self._rules[group] = self._alternates(name, nested=True)
                if self._peek() != ")":
                    raise GrammarSyntaxError(f"expecting ')' at {self._pos}")
                self._pos += 1
                last = [group]
            elif char == ".":
                self._pos += 1
                last = [CharSet((), any=True)]
            elif char in "*+?{":
                low, high = self._repetition()
                if not last:
                    raise GrammarSyntaxError(f"nothing to repeat at {self._pos}")
                del sequence[len(sequence) - len(last) :]
                last = self._repeated(name, last, low, high)
                sequence.extend(last)
                self._space(nested)
                continue
            else:
                break
            sequence.extend(last)
            self._space(nested)
        return sequence

    def _repeated(self, name: str, symbol: list[Element], low: int, high: int | None) -> list[Element]:
        """S{m,n} -> S (m times) then n-m nested optional copies; S{m,} -> S (m times) then S' ::= S S' | ."""
        out = symbol * low
        if high is None:
            recursive = self._fresh(name)
            self._rules[recursive] = [[*symbol, recursive], []]
            return [*out, recursive]
        previous: int | None = None
        for _ in range(high - low):
            optional = self._fresh(name)
            self._rules[optional] = [[*symbol, *([previous] if previous is not None else [])], []]
            previous = optional
        return [*out, previous] if previous is not None else out

    def _repetition(self) -> tuple[int, int | None]:
        char = self._text[self._pos]
        self._pos += 1
        if char != "{":
            return {"*": (0, None), "+": (1, None), "?": (0, 1)}[char]
        self._space(newlines=False)
        low = self._int()
        self._space(newlines=False)
        high: int | None = low
        if self._peek() == ",":
            self._pos += 1
            self._space(newlines=False)
            high = self._int() if self._peek().isdigit() else None
            self._space(newlines=False)
        if self._peek() != "}":
            raise GrammarSyntaxError(f"expecting '}}' at {self._pos}")
        self._pos += 1
        if high is not None and high > MAX_REPETITION:
            high = None
        return low, high

    # -- terminals --------------------------------------------------------------------------------------------

    def _literal(self) -> list[Element]:
        self._pos += 1
        out: list[Element] = []
        while self._peek() != '"':
            if not self._peek():
                raise GrammarSyntaxError("unterminated literal")
            code = self._char()
            out.append(CharSet(((code, code),)))
        self._pos += 1
        return out

    def _char_class(self) -> CharSet:
        self._pos += 1
        negated = self._peek() == "^"
        self._pos += negated
        ranges: list[tuple[int, int]] = []
        while self._peek() != "]":
            if not self._peek():
                raise GrammarSyntaxError("unterminated character class")
            low = self._char()
            high = low
            if self._peek() == "-" and self._text[self._pos + 1 : self._pos + 2] not in ("]", ""):
                self._pos += 1
                high = self._char()
            ranges.append((low, high))
        self._pos += 1
        return CharSet(tuple(ranges), negated)

    def _char(self) -> int:
        text, pos = self._text, self._pos
        if text[pos] != "\\":
            self._pos += 1
            return ord(text[pos])
        kind = text[pos + 1 : pos + 2]
        sizes = {"x": 2, "u": 4, "U": 8}
        if kind in sizes:
            digits = text[pos + 2 : pos + 2 + sizes[kind]]
            if len(digits) != sizes[kind]:
                raise GrammarSyntaxError(f"expecting {sizes[kind]} hex digits at {pos}")
            self._pos += 2 + sizes[kind]
            return int(digits, 16)
        simple = {"t": "\t", "r": "\r", "n": "\n", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-"}
        if kind not in simple:
            raise GrammarSyntaxError(f"unknown escape at {pos}")
        self._pos += 2
        return ord(simple[kind])

    # -- lexing -----------------------------------------------------------------------------------------------

    def _name(self) -> str:
        start = self._pos
        while self._pos < len(self._text) and _is_word(self._text[self._pos]):
            self._pos += 1
        if self._pos == start:
            raise GrammarSyntaxError(f"expecting a name at {start}")
        return self._text[start : self._pos]

    def _int(self) -> int:
        start = self._pos
        while self._peek().isdigit():
            self._pos += 1
        if self._pos == start:
            raise GrammarSyntaxError(f"expecting an integer at {start}")
        return int(self._text[start : self._pos])

    def _space(self, newlines: bool) -> None:
        text = self._text
        while self._pos < len(text):
            char = text[self._pos]
            if char == "#":
                while self._pos < len(text) and text[self._pos] not in "\r\n":
                    self._pos += 1
            elif char in " \t" or (newlines and char in "\r\n"):
                self._pos += 1
            else:
                return

    def _peek(self) -> str:
        return self._text[self._pos : self._pos + 1]

    def _id(self, name: str) -> int:
        return self._ids.setdefault(name, len(self._ids))

    def _fresh(self, base: str) -> int:
        return self._id(f"{base}#{len(self._ids)}")  # "#" is no name's character: no clash


def _is_word(char: str) -> bool:
    return char.isascii() and (char.isalnum() or char == "-")


UTF8_LENGTHS = (1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4)  # by a byte's high nibble; 0: not a lead byte


@dataclass(frozen=True)
class Partial:
    """A UTF-8 character begun but not finished: its bits so far and how many bytes it still needs.
    `remain` < 0: the bytes were not UTF-8 (nothing matches after that)."""

    value: int = 0
    remain: int = 0


@dataclass(frozen=True)
class GrammarState:
    """Where a text stands in a grammar: the live stacks, and the character a token may have left unfinished."""

    grammar: Grammar
    stacks: tuple[Stack, ...]
    partial: Partial = Partial()

    @classmethod
    def initial(cls, grammar: Grammar) -> "GrammarState":
        return cls(grammar, grammar.start())

    @property
    def dead(self) -> bool:
        return not self.stacks or self.partial.remain < 0

    @property
    def complete(self) -> bool:
        """The grammar would accept the end of generation here."""
        return () in self.stacks

    @property
    def depth(self) -> int:
        """The longest stack: how much the text has left open (about two positions per JSON object or array)."""
        return max(map(len, self.stacks), default=0)

    def only_whitespace_follows(self) -> bool:
        """Complete, and anything more could only be whitespace."""
        elements = self.grammar.elements
        return (
            self.complete
            and self.partial.remain == 0
            and all(not stack or _only_whitespace(elements[stack[-1]]) for stack in self.stacks)
        )

    def feed(self, piece: bytes) -> "GrammarState":
        """After one token's bytes, as llama_grammar_accept_token decodes and accepts them."""
        codes, partial = decode_utf8(piece, self.partial)
        stacks = tuple(stack for stack in self.stacks if stack)
        for code in codes:
            if not stacks:
                break
            stacks = self.grammar.accept(stacks, code)
        if partial.remain:  # a cut character: llama.cpp refuses the token unless some end of it could match
            elements = self.grammar.elements
            stacks = tuple(s for s in stacks if s and _may_match(elements[s[-1]], partial))
        return GrammarState(self.grammar, stacks, partial)


def _may_match(element: Element, partial: Partial) -> bool:
    return isinstance(element, CharSet) and element.may_match(partial)


def _only_whitespace(element: Element) -> bool:
    return isinstance(element, CharSet) and element.only_whitespace()


def decode_utf8(piece: bytes, partial: Partial) -> tuple[list[int], Partial]:
    """llama.cpp's decode_utf8: the whole code points in `piece` after `partial`, and what is left unfinished.
    Its C string ends at a NUL byte."""
    piece = piece.split(b"\0", 1)[0]
    codes: list[int] = []
    value, remain, index = partial.value, partial.remain, 0
    while index < len(piece) and remain > 0:
        if piece[index] >> 6 != 2:
            return [], Partial(0, -1)
        value, remain, index = (value << 6) + (piece[index] & 0x3F), remain - 1, index + 1
    if partial.remain > 0 and remain == 0:
        codes.append(value)
    while index < len(piece):
        remain = UTF8_LENGTHS[piece[index] >> 4] - 1
        if remain < 0:
            return [], Partial(0, remain)
        value, index = piece[index] & ((1 << (7 - remain)) - 1), index + 1
        while index < len(piece) and remain > 0:
            value, remain, index = (value << 6) + (piece[index] & 0x3F), remain - 1, index + 1
        if remain == 0:
            codes.append(value)
    return codes, Partial(value, remain)
