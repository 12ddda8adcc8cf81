"""The second tier of the prefix cache: sequences evicted from the KV cache, kept as llama.cpp's saved sequence
state in host memory, and restored into the KV cache when a prompt starts with one of them.

Restoring is a copy (about 1 ms for 230 tokens of SmolLM2, 5 MB) where evaluating the same tokens again takes
hundreds of milliseconds on a CPU, so any prefix of a few blocks is worth keeping. The tier is bounded in tokens,
the unit the pool's memory estimate prices it in; the least recently used entries go first. An entry's state may also
still be on disk (`runtime.disk_tier`, what an earlier instance left), read only when a prompt matches it.
"""

import itertools
from collections import OrderedDict
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from cirrus.runtime.prefix_index import Match, PrefixIndex

# Shorter sequences are cheaper to evaluate again than to keep.
MIN_TOKENS = 32

# A sequence's cells as llama.cpp serialises them: a bytearray when saved from the KV cache (written in place, no
# copy), bytes when read from disk.
State = bytes | bytearray


@dataclass(frozen=True)
class Saved:
    tokens: tuple[int, ...]
    salt: Hashable
    state: State | Path


class HostTier:
    def __init__(self, capacity_tokens: int) -> None:
        self.capacity_tokens = capacity_tokens
        self._index: PrefixIndex[int] = PrefixIndex()
        self._entries: OrderedDict[int, Saved] = OrderedDict()  # least recently used first
        self._ids = itertools.count()
        self.tokens_held = 0

    def __len__(self) -> int:
        return len(self._entries)

    def worth_keeping(self, tokens: Sequence[int], salt: Hashable) -> bool:
        """Long enough, fits at all, and not already here as a prefix of something held."""
        if len(tokens) < MIN_TOKENS or len(tokens) > self.capacity_tokens:
            return False
        match = self._index.longest(tokens, salt)
        return match is None or match.length < len(tokens)

    def put(self, tokens: Sequence[int], salt: Hashable, state: State | Path) -> None:
        """Keep a saved sequence; entries it extends are dropped (it answers every prompt they would)."""
        while (shorter := self._index.longest(tokens, salt)) is not None and shorter.length == len(
            self._index.tokens(shorter.key)
        ):
            self._drop(shorter.key)
        entry = next(self._ids)
        self._entries[entry] = Saved(tuple(tokens), salt, state)
        self._index.put(entry, tokens, salt)
        self.tokens_held += len(tokens)
        while self.tokens_held > self.capacity_tokens:
            self._drop(next(iter(self._entries)))

    def longest(self, prompt: Sequence[int], salt: Hashable) -> Match[int] | None:
        return self._index.longest(prompt, salt)

    def newest_first(self) -> Iterator[Saved]:
        return reversed(self._entries.values())

    def used(self, entry: int) -> Saved:
        """An entry about to be restored, now the most recently used. It stays: while its tokens are here, moving
        the restored sequence out of the KV cache again costs no save."""
        self._entries.move_to_end(entry)
        return self._entries[entry]

    def drop(self, entry: int) -> None:
        """Forget an entry that cannot be restored (unreadable, or too big for the KV cache), if still held."""
        if entry in self._entries:
            self._drop(entry)

    def _drop(self, entry: int) -> None:
        saved = self._entries.pop(entry)
        self._index.remove(entry)
        self.tokens_held -= len(saved.tokens)
