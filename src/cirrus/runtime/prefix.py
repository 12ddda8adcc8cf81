"""Where a new sequence should run so that it recomputes as little of its prompt as possible.

Each slot (a sequence id in the shared KV cache) keeps the tokens it last held. A new prompt goes to a free slot;
if some slot (free or busy) already holds a longer prefix of the prompt, those cells are shared into the chosen
slot instead of being recomputed.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Placement:
    slot: int
    reuse: int
    source: int | None = None  # the slot whose cells to share; None when the slot's own cache is reused


def common_prefix(first: Sequence[int], second: Sequence[int]) -> int:
    length = 0
    for a, b in zip(first, second, strict=False):
        if a != b:
            break
        length += 1
    return length


def place(
    prompt: Sequence[int],
    free: Sequence[int],
    cached: Mapping[int, Sequence[int]],
    last_used: Mapping[int, float],
) -> Placement:
    """Choose a free slot for prompt. At least one prompt token is always left to evaluate (for its logits)."""
    limit = max(len(prompt) - 1, 0)
    own = {slot: min(common_prefix(prompt, cached.get(slot, ())), limit) for slot in free}
    slot = max(free, key=lambda s: (own[s], -last_used.get(s, 0.0)))
    best_source, best = slot, own[slot]
    for other, tokens in cached.items():
        length = min(common_prefix(prompt, tokens), limit)
        if length > best:
            best_source, best = other, length
    if best_source == slot:
        return Placement(slot, best)
    return Placement(slot, best, source=best_source)
