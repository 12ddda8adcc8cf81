"""Keys for the prefixes of a prompt, without a tokenizer: one hash per chat message, or per fixed-size chunk of
a prompt's text, each covering everything before it. Two requests whose chains share their first n hashes share
the start of their rendered prompts, so an instance that served one may hold that much of the other in its KV
cache.

The hashes are 8-byte blake2b digests rather than Python's `hash`: the same in every process (Python salts
`hash` of text per process), so a chain means the same wherever it is computed, and 64 bits make a collision
between the table's 100k prefixes vanishingly unlikely.
"""

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from cirrus.runtime.params import GenerationInput

CHUNK_CHARS = 256  # a raw prompt's unit of matching
SHARED_ROLES = frozenset({"system", "developer"})
_DIGEST_BYTES = 8


@dataclass(frozen=True)
class PromptChain:
    """`hashes[i]` stands for the prompt's first i + 1 parts. A match of at most `shared_head` parts covers only
    what many conversations may share: the leading system messages, or no more than half of a text prompt."""

    hashes: tuple[int, ...]
    shared_head: int


def prompt_chain(inputs: GenerationInput) -> PromptChain:
    seed = _digest(0, _canonical(_rendering(inputs)))
    if inputs.messages is not None:
        hashes = tuple(_chained(seed, (_canonical(message) for message in inputs.messages)))
        return PromptChain(hashes, _leading_shared(inputs.messages))
    hashes = tuple(_chained(seed, (chunk.encode() for chunk in _chunks(inputs.prompt or ""))))
    return PromptChain(hashes, len(hashes) // 2)


def _rendering(inputs: GenerationInput) -> dict[str, Any]:
    """What changes the rendered prompt, or the cells it leaves, besides the messages or text themselves."""
    return {
        "adapter": inputs.adapter,  # cells computed under a LoRA adapter serve only that adapter
        "messages": inputs.messages is not None,
        "raw": inputs.raw,
        "family": inputs.family,
        "tools": inputs.tools,
        "enable_thinking": inputs.enable_thinking,
    }


def _chained(seed: int, parts: Iterable[bytes]) -> Iterator[int]:
    previous = seed
    for part in parts:
        previous = _digest(previous, part)
        yield previous


def _digest(previous: int, part: bytes) -> int:
    digest = hashlib.blake2b(previous.to_bytes(_DIGEST_BYTES, "big"), digest_size=_DIGEST_BYTES)
    digest.update(part)
    return int.from_bytes(digest.digest(), "big")


def _canonical(value: object) -> bytes:
    """One spelling per value, whatever the order of its keys (surrogates and all: ASCII escapes)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()


def _chunks(text: str) -> Iterator[str]:
    for start in range(0, len(text), CHUNK_CHARS):
        yield text[start : start + CHUNK_CHARS]


def _leading_shared(messages: Iterable[dict[str, Any]]) -> int:
    count = 0
    for message in messages:
        if message.get("role") not in SHARED_ROLES:
            break
        count += 1
    return count
