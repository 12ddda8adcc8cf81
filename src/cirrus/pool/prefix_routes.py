"""Which instances served which prompt prefixes (see `cirrus.pool.prompt_keys`), so a request can go where the
longest start of its prompt may still be in the KV cache: a conversation's next turn finds its earlier turns.

Approximate, like SGLang's cache-aware router: an instance's engine keeps only some of the prefixes it served,
and this table forgets the least recently used of a bounded number. Stdlib only, so placement could use it too.
"""

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

MAX_PREFIXES = 100_000


@dataclass(frozen=True)
class PrefixMatch:
    instance_id: str
    depth: int  # how many leading hashes of the chain the instance served


class PrefixRoutes:
    def __init__(self, capacity: int = MAX_PREFIXES) -> None:
        self._capacity = capacity
        # Least recently served first. Tuples, as most prefixes have one holder: a set would triple the memory.
        self._holders: OrderedDict[int, tuple[str, ...]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._holders)

    def remember(self, chain: Sequence[int], instance_id: str) -> None:
        """The instance served a prompt with this chain: it may hold every prefix of it."""
        for key in chain:
            holders = self._holders.pop(key, ())
            self._holders[key] = holders if instance_id in holders else (*holders, instance_id)
        while len(self._holders) > self._capacity:
            self._holders.popitem(last=False)

    def best(self, chain: Sequence[int], candidates: Sequence[str]) -> PrefixMatch | None:
        """The candidate that served the longest prefix of the chain; among equals, the one listed first.

        The deepest hash is looked up first: a hash covers its whole prefix, so a hit there needs no check of
        the shallower ones (which the table may have forgotten already)."""
        for depth in range(len(chain), 0, -1):
            holders = self._holders.get(chain[depth - 1])
            if holders:
                chosen = next((c for c in candidates if c in holders), None)
                if chosen is not None:
                    return PrefixMatch(chosen, depth)
        return None

    def forget(self, instance_id: str) -> None:
        """The instance stopped: its cache is gone. A scan of the table, paid once per stopped instance."""
        held = [(key, holders) for key, holders in self._holders.items() if instance_id in holders]
        for key, holders in held:
            others = tuple(holder for holder in holders if holder != instance_id)
            if others:
                self._holders[key] = others  # an update keeps the key's place in the order
            else:
                del self._holders[key]
