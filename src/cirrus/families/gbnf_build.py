"""Pieces for writing GBNF grammars by hand: literals, "any text up to a marker", and renaming a grammar's rules
so that several can live in one file (one JSON-schema grammar per tool or per argument)."""

import re

# A GBNF text as llama.cpp lexes it: string literals, character classes and repetition bounds are opaque; names
# are runs of word characters; anything else is one character.
_TOKENS = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|\{[0-9, ]*\}|[A-Za-z0-9-]+|\s+|.', re.DOTALL)
_DEFINED = re.compile(r"^([A-Za-z0-9-]+)\s*::=", re.MULTILINE)
_LITERAL_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def literal(text: str) -> str:
    """`text` as a GBNF string literal."""
    return '"' + "".join(_literal_char(char) for char in text) + '"'


def _literal_char(char: str) -> str:
    if char in _LITERAL_ESCAPES:
        return _LITERAL_ESCAPES[char]
    if ord(char) < 0x20 or ord(char) == 0x7F:
        return f"\\x{ord(char):02X}"
    return char


def _class_char(char: str) -> str:
    """One character inside `[...]`: letters and digits as they are, anything else as a hex escape."""
    code = ord(char)
    if char.isascii() and char.isalnum():
        return char
    if code < 0x100:
        return f"\\x{code:02X}"
    return f"\\u{code:04X}" if code < 0x10000 else f"\\U{code:08X}"


def text_then(name: str, marker: str) -> list[str]:
    """Rules `{name}-0`, `{name}-1`, ...: any text that does not contain `marker`, then `marker` itself.

    State i of the automaton has matched the first i characters of the marker (Knuth-Morris-Pratt): a character
    that continues some prefix of the marker moves to that state, any other character back to state 0, and the
    marker's last character completes the rule. Right-recursive, so llama.cpp's stacks stay one rule deep.
    """
    if not marker:
        raise ValueError("a marker is at least one character")
    rules = []
    for state in range(len(marker)):
        moves = {char: _next_state(marker, state, char) for char in sorted(set(marker))}
        onward = {char: target for char, target in moves.items() if target}
        alternatives = [
            literal(char) if target == len(marker) else f"{literal(char)} {name}-{target}"
            for char, target in onward.items()
        ]
        alternatives.append("[^" + "".join(_class_char(char) for char in onward) + f"] {name}-0")
        rules.append(f"{name}-{state} ::= " + " | ".join(alternatives))
    return rules


def _next_state(marker: str, state: int, char: str) -> int:
    """The longest prefix of `marker` that ends the text matched so far plus `char`."""
    seen = marker[:state] + char
    for size in range(len(seen), 0, -1):
        if seen.endswith(marker[:size]):
            return size
    return 0


def prefixed(grammar: str, prefix: str) -> str:
    """`grammar` with every rule it defines renamed `{prefix}{name}`, references included."""
    names = set(_DEFINED.findall(grammar))
    return "".join(prefix + token if token in names else token for token in _TOKENS.findall(grammar))
