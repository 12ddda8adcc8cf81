"""Which stored token sequence shares the longest prefix with a prompt, found in time proportional to the prompt.

Each sequence is split into blocks of BLOCK tokens, and each full block is indexed by a chain hash: the hash of
the block's tokens together with the hash of everything before it (vLLM's automatic prefix caching keys its KV
blocks the same way). Walking a prompt's chain finds the sequences that hold its first k blocks; a token-by-token
comparison of those few finishes the match, so a sequence's partial last block counts too, and an accidental hash
collision can only shorten a match, never make a wrong one. A salt starts the chain: sequences under different
salts (different LoRA adapters once those exist) never match each other.
"""

from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

BLOCK = 16

Key = TypeVar("Key", bound=Hashable)


@dataclass
class _Stored:
    salt: Hashable
    tokens: list[int] = field(default_factory=list)
    chain: list[int] = field(default_factory=list)  # one hash per full block of tokens


@dataclass(frozen=True)
class Match(Generic[Key]):
    key: Key
    length: int


class PrefixIndex(Generic[Key]):
    def __init__(self) -> None:
        self._stored: dict[Key, _Stored] = {}
        self._holders: dict[int, set[Key]] = {}

    def __contains__(self, key: Key) -> bool:
        return key in self._stored

    def __len__(self) -> int:
        return len(self._stored)

    def __iter__(self) -> Iterator[Key]:
        return iter(self._stored)

    def tokens(self, key: Key) -> list[int]:
        """The tokens stored under key (the caller must not change the list)."""
        stored = self._stored.get(key)
        return stored.tokens if stored is not None else []

    def salt(self, key: Key) -> Hashable:
        stored = self._stored.get(key)
        return stored.salt if stored is not None else None

    def put(self, key: Key, tokens: Sequence[int], salt: Hashable = None) -> None:
        self.remove(key)
        self._stored[key] = _Stored(salt)
        self.extend(key, tokens)

    def extend(self, key: Key, tokens: Sequence[int]) -> None:
        stored = self._stored[key]
        stored.tokens.extend(tokens)
        while len(stored.chain) < len(stored.tokens) // BLOCK:
            start = len(stored.chain) * BLOCK
            parent = stored.chain[-1] if stored.chain else _root(stored.salt)
            digest = _block_hash(parent, stored.tokens[start : start + BLOCK])
            stored.chain.append(digest)
            self._holders.setdefault(digest, set()).add(key)

    def truncate(self, key: Key, length: int) -> None:
        """Keep only the first `length` tokens under key."""
        stored = self._stored[key]
        del stored.tokens[length:]
        while len(stored.chain) > length // BLOCK:
            self._release(stored.chain.pop(), key)

    def remove(self, key: Key) -> None:
        stored = self._stored.pop(key, None)
        if stored is not None:
            for digest in stored.chain:
                self._release(digest, key)

    def longest(self, prompt: Sequence[int], salt: Hashable = None) -> Match[Key] | None:
        """The stored sequence sharing the longest prefix with prompt (ties: any), or None when none shares any."""
        candidates, depth = self._deepest_block(prompt, salt)
        best: Match[Key] | None = None
        for key in candidates:
            stored = self._stored[key]
            if stored.salt != salt:
                continue
            length = _common_prefix(prompt, stored.tokens, assumed=depth * BLOCK)
            if length > 0 and (best is None or length > best.length):
                best = Match(key, length)
        return best

    def _deepest_block(self, prompt: Sequence[int], salt: Hashable) -> tuple[set[Key] | list[Key], int]:
        """The holders of the prompt's deepest indexed block, and how many blocks deep; everyone at depth 0."""
        candidates: set[Key] | list[Key] = list(self._stored)
        depth, digest = 0, _root(salt)
        while (depth + 1) * BLOCK <= len(prompt):
            digest = _block_hash(digest, prompt[depth * BLOCK : (depth + 1) * BLOCK])
            holders = self._holders.get(digest)
            if not holders:
                break
            candidates, depth = holders, depth + 1
        return candidates, depth

    def _release(self, digest: int, key: Key) -> None:
        holders = self._holders.get(digest)
        if holders is not None:
            holders.discard(key)
            if not holders:
                del self._holders[digest]


def _root(salt: Hashable) -> int:
    return hash(("cirrus-prefix", salt))


def _block_hash(parent: int, block: Sequence[int]) -> int:
    return hash((parent, tuple(block)))


def common_prefix(first: Sequence[int], second: Sequence[int]) -> int:
    """How many leading tokens the two have in common."""
    return _common_prefix(first, second, assumed=0)


def _common_prefix(prompt: Sequence[int], tokens: Sequence[int], assumed: int) -> int:
    """Leading tokens equal in both. The first `assumed` are checked in one slice comparison (a hash collision
    would fail it, and the count then starts over from zero)."""
    start = assumed if list(prompt[:assumed]) == list(tokens[:assumed]) else 0
    length, limit = start, min(len(prompt), len(tokens))
    while length < limit and prompt[length] == tokens[length]:
        length += 1
    return length
