"""Indexes that keep a decision from scanning every node: members ranked by a key that changes often, and
members visited a few at a time in turn."""

import heapq
import itertools
from collections.abc import Callable, Iterator
from typing import Any

Key = tuple[Any, ...]


class RankedSet:
    """Members (node ids) with a sort key, smallest first. Setting a key costs O(log n) amortised; replaced
    entries stay in the heap until they surface (then dropped) or outnumber the live ones (then rebuilt)."""

    def __init__(self) -> None:
        self._heap: list[tuple[Key, str, int]] = []
        self._current: dict[str, tuple[Key, int]] = {}
        self._versions = itertools.count()

    def __len__(self) -> int:
        return len(self._current)

    def __contains__(self, member: str) -> bool:
        return member in self._current

    def set(self, member: str, key: Key) -> None:
        current = self._current.get(member)
        if current is not None and current[0] == key:
            return
        version = next(self._versions)
        self._current[member] = (key, version)
        heapq.heappush(self._heap, (key, member, version))
        self._settle()

    def discard(self, member: str) -> None:
        if self._current.pop(member, None) is not None:
            self._settle()

    def _settle(self) -> None:
        """Drop replaced entries from the top (each is dropped once, so this is paid by the changes that made
        them, not by a later lookup), and rebuild when the ones deeper down outnumber the live."""
        heap, current = self._heap, self._current
        while heap:
            _, member, version = heap[0]
            live = current.get(member)
            if live is not None and live[1] == version:
                break
            heapq.heappop(heap)
        if len(heap) > 2 * len(current) + 64:
            self._rebuild()

    def smallest(self, count: int, accept: Callable[[str], bool], looked_at: int) -> list[str]:
        """Up to `count` accepted members in key order, looking at no more than `looked_at` live ones."""
        found: list[str] = []
        held: list[tuple[Key, str, int]] = []
        while self._heap and len(found) < count and len(held) < looked_at:
            entry = heapq.heappop(self._heap)
            _, member, version = entry
            current = self._current.get(member)
            if current is None or current[1] != version:
                continue  # replaced or discarded: dropped for good
            held.append(entry)
            if accept(member):
                found.append(member)
        for entry in held:
            heapq.heappush(self._heap, entry)
        return found

    def _rebuild(self) -> None:
        self._heap = [(key, member, version) for member, (key, version) in self._current.items()]
        heapq.heapify(self._heap)


class RotatingSet:
    """Members visited a few at a time, each visit starting where the last one stopped; O(1) add and remove."""

    def __init__(self) -> None:
        self._members: list[str] = []
        self._position: dict[str, int] = {}
        self._cursor = 0

    def __len__(self) -> int:
        return len(self._members)

    def __contains__(self, member: str) -> bool:
        return member in self._position

    def __iter__(self) -> Iterator[str]:
        return iter(self._members)

    def add(self, member: str) -> None:
        if member not in self._position:
            self._position[member] = len(self._members)
            self._members.append(member)

    def discard(self, member: str) -> None:
        index = self._position.pop(member, None)
        if index is None:
            return
        last = self._members.pop()
        if index < len(self._members):
            self._members[index] = last
            self._position[last] = index

    def next_few(self, count: int) -> list[str]:
        size = len(self._members)
        if size <= count:
            return list(self._members)
        start = self._cursor % size
        self._cursor = start + count
        taken = self._members[start : start + count]
        return taken + self._members[: count - len(taken)]
