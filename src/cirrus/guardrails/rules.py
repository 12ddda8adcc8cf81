"""Redaction rules, and when the text a stream has shown them decides a match.

A stream is redacted exactly as its whole text would be because a rule commits a match only before its
frontier: the earliest start that more text could still turn into a match, or change.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Hit:
    start: int
    end: int
    replacement: str


class Rule(Protocol):
    def find(self, text: str, pos: int, limit: int) -> Hit | None:
        """The leftmost match that starts in [pos, limit)."""
        ...

    def frontier(self, text: str, pos: int) -> int:
        """The earliest start at or after pos that text appended later could still change."""
        ...


class Detector:
    """A built-in rule whose matches are short and drawn from a small alphabet.

    Its pattern may read at most `reach` characters from a start, and at most `lookahead` characters past the
    first character outside `alphabet` (it consumes only characters of the alphabet). So a start is settled
    once the text holds `reach` characters from it, or a character outside the alphabet that many before its
    end: in prose, only the last word or number is still open.
    """

    def __init__(
        self,
        pattern: str,
        replacement: str,
        alphabet: str,
        reach: int,
        lookahead: int,
        accept: Callable[[str], bool],
    ) -> None:
        self.pattern = re.compile(pattern)
        self.replacement = replacement
        self.reach = reach
        self.lookahead = lookahead
        self.accept = accept
        self._open_tail = re.compile(rf"{alphabet}*\Z")

    def find(self, text: str, pos: int, limit: int) -> Hit | None:
        match = self.pattern.search(text, pos)
        while match is not None and match.start() < limit:
            if self.accept(match.group()):
                return Hit(match.start(), match.end(), self.replacement)
            match = self.pattern.search(text, match.start() + 1)
        return None

    def frontier(self, text: str, pos: int) -> int:
        start = max(pos, len(text) - self.reach + 1)
        end = len(text) - self.lookahead + 1
        if end <= start:
            return start
        tail = self._open_tail.search(text, start, end)
        return tail.start() if tail is not None else end


class DenyRule:
    """A configured pattern, which may be anything: each start is matched within a window of `window`
    characters, so a match is at most that long and a start is settled once the window is in."""

    replacement = "[redacted]"

    def __init__(self, pattern: re.Pattern[str], window: int) -> None:
        self.pattern = pattern
        self.window = window

    def find(self, text: str, pos: int, limit: int) -> Hit | None:
        for start in range(pos, limit):
            match = self.pattern.match(text, start, start + self.window)
            if match is not None and match.end() > start:  # an empty match redacts nothing
                return Hit(start, match.end(), self.replacement)
        return None

    def frontier(self, text: str, pos: int) -> int:
        return max(pos, len(text) - self.window + 1)
