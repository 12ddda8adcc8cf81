"""Background work's leases (batch items) and their preemption.

Background work takes only slots that no interactive request wants, and yields them two ways:
- an interactive request that has to wait preempts one background lease of its model per waiting request;
- background sequences share every decode step with interactive ones and slow them all, so while an instance
  serves interactive requests, background work keeps at most half its slots (`share`), and the newest
  background leases beyond that are preempted when an interactive request starts there.
A preempted holder's callback stops the work (the worker frees the slot at its next decode step) and the item
goes back to its queue.
"""

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(eq=False)
class _Held:
    model_id: str
    instance: object
    preempt: Callable[[], None]
    preempted: bool = False


def share(slots: int) -> int:
    """The slots background work may keep on an instance that serves interactive requests."""
    return max(1, slots // 2)


class BackgroundLeases:
    def __init__(self) -> None:
        self._held: dict[object, _Held] = {}

    def hold(self, lease: object, model_id: str, instance: object, preempt: Callable[[], None]) -> None:
        self._held[lease] = _Held(model_id, instance, preempt)

    def drop(self, lease: object) -> None:
        self._held.pop(lease, None)

    def holds(self, model_id: str) -> bool:
        """Background work holds slots of the model: a request that must wait takes one of those (a decode
        step away) rather than start another instance."""
        return any(held.model_id == model_id for held in self._held.values())

    def held_on(self, instance: object) -> int:
        """Background leases on the instance, preempted ones that have not given their slot back included."""
        return sum(1 for held in self._held.values() if held.instance is instance)

    def preempt_for(self, model_id: str, waiting: int) -> bool:
        """Preempt the newest background lease of the model unless `waiting` preemptions are already under way
        for it; False when there is nothing (more) to preempt."""
        mine = [held for held in self._held.values() if held.model_id == model_id]
        if sum(held.preempted for held in mine) >= waiting:
            return False
        running = [held for held in mine if not held.preempted]
        if not running:
            return False
        _preempt(running[-1])
        return True

    def preempt_beyond(self, instance: object, keep: int) -> int:
        """Preempt the newest running background leases on the instance beyond `keep`; how many were."""
        running = [held for held in self._held.values() if held.instance is instance and not held.preempted]
        excess = running[keep:]
        for held in reversed(excess):
            _preempt(held)
        return len(excess)


def _preempt(held: _Held) -> None:
    held.preempted = True
    held.preempt()
