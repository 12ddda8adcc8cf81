"""Markdown to the chunks AI Search embeds: split by headings first, then long sections by meaning (semchunk).

Each chunk knows its heading path ("Guide > Install") and its text starts with that path, so a chunk deep in a
section still says what it is about. Sizes are counted with `estimate_tokens`, an estimate made to stay above
the word pieces MiniLM's tokenizer makes (the embedding model refuses a text longer than it reads, rather than
truncate it): a chunk's estimate, the two tokens the model adds to every text included, never exceeds
`size_tokens`.
"""

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass

from semchunk.semchunk import chunk as semantic_chunks

from cirrus.rag.model import ChunkText

SPECIAL_TOKENS = 2  # [CLS] and [SEP], which the embedding model adds to every text
HEADING_SEPARATOR = " > "
_HEADING_SHARE = 4  # a heading line takes at most a quarter of a chunk

# Runs of letters, runs of digits, and every other visible character alone: BERT's pre-tokenizer splits there.
_TOKEN = re.compile(r"[^\W\d_]+|\d+|[^\w\s]|_")
_LETTERS_PER_PIECE = 4  # long or rare words break into pieces; measured against MiniLM's vocabulary
_DIGITS_PER_PIECE = 2

_ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_NOT_A_PARAGRAPH = re.compile(r"^ {0,3}([-*+>|]|\d+[.)])")  # list items, quotes, tables: no setext heading


def estimate_tokens(text: str) -> int:
    """Word pieces, estimated high: a run of ASCII letters counts one piece per four letters (started), digits
    one per two, any other visible character one, and letters outside ASCII one each (CJK is split per
    character; other scripts break into many pieces of an English vocabulary). On English prose this is about
    15% above MiniLM's count, on code and identifiers about even."""
    count = 0
    for token in _TOKEN.findall(text):
        if not token.isascii():
            count += len(token)
        elif token.isdigit():
            count += math.ceil(len(token) / _DIGITS_PER_PIECE)
        else:
            count += math.ceil(len(token) / _LETTERS_PER_PIECE)
    return count


def chunk_markdown(markdown: str, size_tokens: int, overlap_percent: int) -> list[ChunkText]:
    """Chunks in document order, positions 0..; sections without text are skipped. Within a section, consecutive
    chunks share about `overlap_percent` of `size_tokens`."""
    budget = size_tokens - SPECIAL_TOKENS
    if budget < _HEADING_SHARE:
        raise ValueError(f"chunks of {size_tokens} tokens are too small")
    chunks: list[tuple[str, str]] = []
    for section in _sections(markdown):
        heading = HEADING_SEPARATOR.join(section.path)
        line = _heading_line(section.path, budget // _HEADING_SHARE)
        prefix = f"{line}\n\n" if line else ""
        for piece in _split(section.body, budget - estimate_tokens(prefix), overlap_percent):
            chunks.append((prefix + piece, heading))
    return [ChunkText(position, text, heading) for position, (text, heading) in enumerate(chunks)]


@dataclass(frozen=True)
class _Section:
    path: tuple[str, ...]  # the titles of the headings it is under, outermost first
    body: str


class _SectionReader:
    """Reads Markdown line by line into sections: ATX (`## Title`) and setext (a title underlined with `===`
    or `---`) headings start one; lines in fenced code blocks are never headings."""

    def __init__(self) -> None:
        self.headings: list[tuple[int, str]] = []
        self.lines: list[str] = []
        self.fence: str | None = None

    def read(self, line: str) -> _Section | None:
        """The section this line ends, if it is a heading that ends one."""
        if self.fence is not None or _FENCE.match(line):
            self._track_fence(line)
            self.lines.append(line)
            return None
        if heading := _ATX_HEADING.match(line):
            return self._start(len(heading.group(1)), heading.group(2) or "")
        if (underline := _SETEXT_UNDERLINE.match(line)) and self._ends_with_title():
            title = self.lines.pop()
            return self._start(1 if underline.group(1)[0] == "=" else 2, title)
        self.lines.append(line)
        return None

    def end(self) -> _Section:
        return self._section()

    def _start(self, level: int, title: str) -> _Section:
        ended = self._section()
        self.headings = [(depth, text) for depth, text in self.headings if depth < level]
        self.headings.append((level, title.strip()))
        self.lines = []
        return ended

    def _section(self) -> _Section:
        path = tuple(title for _, title in self.headings if title)
        return _Section(path, "\n".join(self.lines).strip())

    def _ends_with_title(self) -> bool:
        """A one-line paragraph before the underline: a longer paragraph, a list or a table keeps `---` a rule."""
        if not self.lines or not self.lines[-1].strip() or _NOT_A_PARAGRAPH.match(self.lines[-1]):
            return False
        return len(self.lines) == 1 or not self.lines[-2].strip()

    def _track_fence(self, line: str) -> None:
        marker = _FENCE.match(line)
        if marker is None:
            return
        if self.fence is None:
            self.fence = marker.group(1)
        elif marker.group(1).startswith(self.fence) and not line.strip().lstrip(self.fence[0]):
            self.fence = None


def _sections(markdown: str) -> Iterator[_Section]:
    reader = _SectionReader()
    for line in markdown.split("\n"):
        ended = reader.read(line)
        if ended is not None and ended.body:
            yield ended
    if (last := reader.end()).body:
        yield last


def _heading_line(path: tuple[str, ...], limit: int) -> str:
    """The heading path as the chunk's first line, its outer titles dropped (then the last one's words) until
    it fits within `limit` tokens."""
    for start in range(len(path)):
        line = HEADING_SEPARATOR.join(path[start:])
        if estimate_tokens(line) <= limit:
            return line
    words = path[-1].split() if path else []
    while words and estimate_tokens(" ".join(words)) > limit:
        words.pop()
    return " ".join(words)


def _split(body: str, size: int, overlap_percent: int) -> list[str]:
    if estimate_tokens(body) <= size:
        return [body]
    overlap = overlap_percent / 100 if overlap_percent > 0 else None
    pieces = semantic_chunks(body, size, estimate_tokens, memoize=False, overlap=overlap)
    assert isinstance(pieces, list)  # without offsets, semchunk answers the chunks alone
    return [piece for piece in pieces if piece.strip()]
