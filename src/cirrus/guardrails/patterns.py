"""Deny patterns from configuration: case-insensitive regular expressions, compiled and checked once."""

import re
from collections.abc import Sequence


def compile_deny_patterns(patterns: Sequence[str]) -> tuple[re.Pattern[str], ...]:
    """Raises ValueError naming the first pattern that is not a usable regular expression."""
    if isinstance(patterns, str):  # a lone string is a Sequence[str] too: one pattern per character
        raise TypeError("deny patterns must be a sequence of strings, not one string")
    return tuple(_compile(pattern) for pattern in patterns)


def _compile(pattern: str) -> re.Pattern[str]:
    try:
        compiled = re.compile(pattern, re.IGNORECASE)
    except re.error as error:
        raise ValueError(f"invalid deny pattern {pattern!r}: {error}") from None
    if compiled.fullmatch("") is not None:
        raise ValueError(f"invalid deny pattern {pattern!r}: it matches the empty string, so everything")
    return compiled
