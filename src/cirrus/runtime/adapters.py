"""The LoRA adapters an instance has loaded, least recently used first.

An adapter is loaded once per instance (a file read and a copy of its tensors, milliseconds for a small rank) and
kept while there is room, so a fine-tune's second request pays nothing for it. Past `capacity` the least recently
used adapter that no running sequence needs is freed; when every loaded adapter is in use the instance holds one
more until some are released, since refusing the request would be worse than a few megabytes.

Adapters are named by the path of their GGUF file: the store keeps them content-addressed, so a path never
names two different adapters.
"""

from collections.abc import Callable, Collection
from typing import Any

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
