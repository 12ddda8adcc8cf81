"""Background work's leases (batch items) and their preemption.

Background work takes only slots that no interactive request wants. When an interactive request has to wait and
background work holds a slot of its model, one background lease per waiting request is preempted: its holder's
callback stops the work (the worker frees the slot at its next decode step), the item goes back to its queue,
and the freed slot goes to the interactive request, which background waiters never take while it waits.
"""

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(eq=False)
class _Held:
    model_id: str
    preempt: Callable[[], None]
    preempted: bool = False


class BackgroundLeases:
    def __init__(self) -> None:
        self._held: dict[object, _Held] = {}

    def hold(self, lease: object, model_id: str, preempt: Callable[[], None]) -> None:
        self._held[lease] = _Held(model_id, preempt)

    def drop(self, lease: object) -> None:
        self._held.pop(lease, None)

    def held(self, model_id: str) -> int:
        return sum(1 for held in self._held.values() if held.model_id == model_id)

    def preempt_for(self, model_id: str, waiting: int) -> bool:
        """Preempt the newest background lease of the model unless `waiting` preemptions are already under way
        for it; False when there is nothing (more) to preempt."""
        mine = [held for held in self._held.values() if held.model_id == model_id]
        if sum(held.preempted for held in mine) >= waiting:
            return False
        running = [held for held in mine if not held.preempted]
        if not running:
            return False
        victim = running[-1]
        victim.preempted = True
        victim.preempt()
        return True
