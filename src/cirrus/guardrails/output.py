"""Output filters, applied alike to whole answers and to streams.

A stream holds back only what could still become part of a match, from the earliest start a rule has not
settled, and never more than MAX_HOLD_BACK characters, so it cannot stall. For any split of a text into
pieces, joining what feed() returns and then flush() gives exactly apply(text): apply() is one feed and a
flush, and a rule commits only matches that no later text could change.
"""

from collections.abc import Sequence

from cirrus.guardrails.detectors import DETECTORS, REACH
from cirrus.guardrails.patterns import compile_deny_patterns
from cirrus.guardrails.rules import DenyRule, Hit, Rule

MAX_HOLD_BACK = REACH - 1
# Text kept before the cursor, so that lookbehinds and \b see what precedes a start.
CONTEXT = REACH


class StreamRedactor:
    """One stream's state; feed() the pieces in order, then flush() once."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self._rules = tuple(rules)
        self._text = ""
        self._cursor = 0  # where, in _text, the text not yet released starts

    @property
    def held(self) -> int:
        return len(self._text) - self._cursor

    def feed(self, piece: str) -> str:
        """The text that is safe to emit now."""
        if not self._rules:
            return piece
        self._text += piece
        return self._release(final=False)

    def flush(self) -> str:
        """The rest, at the end of the stream."""
        return self._release(final=True) if self._rules else ""

    def _release(self, final: bool) -> str:
        text, cursor = self._text, self._cursor
        limit = len(text) if final else min(rule.frontier(text, cursor) for rule in self._rules)
        released, cursor = _redact(self._rules, text, cursor, limit)
        self._keep_from(cursor)
        return released

    def _keep_from(self, cursor: int) -> None:
        drop = max(0, cursor - CONTEXT)
        self._text, self._cursor = self._text[drop:], cursor - drop


def _redact(rules: Sequence[Rule], text: str, cursor: int, limit: int) -> tuple[str, int]:
    """The text from the cursor up to the limit with matches replaced (one may end past the limit), and
    where the text released ends."""
    parts: list[str] = []
    hits = [rule.find(text, cursor, limit) for rule in rules]
    while (hit := _leftmost(hits)) is not None:
        parts += (text[cursor : hit.start], hit.replacement)
        cursor = hit.end
        hits = [
            _still_ahead(rule, found, text, cursor, limit) for rule, found in zip(rules, hits, strict=True)
        ]
    if cursor < limit:
        parts.append(text[cursor:limit])
        cursor = limit
    return "".join(parts), cursor


def _leftmost(hits: list[Hit | None]) -> Hit | None:
    """The first to start; at the same start, the first rule's."""
    return min((hit for hit in hits if hit is not None), key=lambda hit: hit.start, default=None)


def _still_ahead(rule: Rule, found: Hit | None, text: str, cursor: int, limit: int) -> Hit | None:
    """A rule's next match after the cursor moved: the one it found before, unless the cursor passed it."""
    if found is None or found.start >= cursor:
        return found
    return rule.find(text, cursor, limit)


class OutputFilter:
    """Built once per (model, account) from `output_filters` and `output_deny_patterns`; holds no stream
    state, so requests share it. Deny patterns win over the detectors, then card, e-mail, phone."""

    def __init__(self, names: Sequence[str] = (), deny_patterns: Sequence[str] = ()) -> None:
        unknown = sorted(set(names) - DETECTORS.keys())
        if unknown:
            raise ValueError(f"unknown output filter {unknown[0]!r}: known are {', '.join(DETECTORS)}")
        denied = (DenyRule(pattern, REACH) for pattern in compile_deny_patterns(deny_patterns))
        detectors = (detector for name, detector in DETECTORS.items() if name in names)
        self._rules: tuple[Rule, ...] = (*denied, *detectors)

    @property
    def enabled(self) -> bool:
        return bool(self._rules)

    def apply(self, text: str) -> str:
        if not self._rules:
            return text
        redactor = self.stream()
        return redactor.feed(text) + redactor.flush()

    def stream(self) -> StreamRedactor:
        return StreamRedactor(self._rules)
