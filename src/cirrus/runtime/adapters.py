"""The LoRA adapters an instance has loaded, least recently used first.

An adapter is loaded once per instance (a file read and a copy of its tensors, milliseconds for a small rank) and
kept while there is room, so a fine-tune's second request pays nothing for it. Past `capacity` the least recently
used adapter that no running sequence needs is freed; when every loaded adapter is in use the instance holds one
more until some are released, since refusing the request would be worse than a few megabytes.

Adapters are named by the path of their GGUF file: the store keeps them content-addressed, so a path never
names two different adapters.
"""

from collections.abc import Callable, Collection, Iterable
from enum import Enum
from typing import Any, Literal

DEFAULT_CAPACITY = 8

Handle = Any


class AdapterError(Exception):
    """llama.cpp refused an adapter file (unreadable, or made for another base model)."""


class Adapters:
    def __init__(
        self,
        load: Callable[[str], Handle],
        free: Callable[[Handle], None],
        capacity: int = DEFAULT_CAPACITY,
    ) -> None:
        self._load = load
        self._free = free
        self._capacity = capacity
        self._loaded: dict[str, Handle] = {}  # least recently used first

    def __len__(self) -> int:
        return len(self._loaded)

    def __contains__(self, path: str) -> bool:
        return path in self._loaded

    def handle(self, path: str, in_use: Collection[str] = ()) -> Handle:
        """The loaded adapter at path, loading it (and freeing what no sequence in `in_use` needs) if it is not."""
        if path in self._loaded:
            self._loaded[path] = self._loaded.pop(path)
            return self._loaded[path]
        handle = self._load(path)
        self._loaded[path] = handle
        self._shrink(keep={path, *in_use})
        return handle

    def _shrink(self, keep: Collection[str]) -> None:
        for path in [p for p in self._loaded if p not in keep]:
            if len(self._loaded) <= self._capacity:
                return
            self._free(self._loaded.pop(path))


class _Mark(Enum):
    NOTHING = "nothing"  # no turn taken yet
    BATCH = "batch"  # the last turn was batch work's


Cursor = str | _Mark | None


class AdapterTurns:
    """Which adapter's sequences each decode step carries. Groups with interactive sequences take turns in a
    fixed order (no adapter first) and the groups of batch work alone share one more turn after them, each in
    turn: no group starves, and interactive answers wait for batch work at most one step per round, as they do
    without adapters. `choose` does not move the turn (a step that must be planned again gets the same group);
    `taken` does, once the step ran."""

    def __init__(self) -> None:
        self._last: Cursor = _Mark.NOTHING  # the last interactive group's adapter, or BATCH
        self._last_batch: Cursor = _Mark.NOTHING

    def choose(self, sequences: Iterable[tuple[str | None, bool]]) -> str | None:
        """`sequences`: each candidate's (adapter, background)."""
        sequences = list(sequences)
        interactive = sorted({adapter for adapter, background in sequences if not background}, key=_order)
        batch_only = sorted({adapter for adapter, _ in sequences} - set(interactive), key=_order)
        upcoming = _following(interactive, self._last)
        if upcoming is not _Mark.NOTHING:
            return upcoming
        if batch_only:
            batch = _following(batch_only, self._last_batch)
            return batch_only[0] if batch is _Mark.NOTHING else batch
        return interactive[0] if interactive else None

    def taken(self, adapter: str | None, batch_only: bool) -> None:
        if batch_only:
            self._last, self._last_batch = _Mark.BATCH, adapter
        else:
            self._last = adapter


def _following(ordered: list[str | None], last: Cursor) -> str | Literal[_Mark.NOTHING] | None:
    """The first adapter after `last` in order (the first of all after nothing or the batch turn), or NOTHING."""
    if isinstance(last, _Mark):
        return ordered[0] if ordered else _Mark.NOTHING
    return next((adapter for adapter in ordered if _order(adapter) > _order(last)), _Mark.NOTHING)


def _order(adapter: str | None) -> str:
    return adapter or ""
