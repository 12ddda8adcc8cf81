"""What the placer knows of one node: its last snapshot, plus the requests and cold starts it sent there since.

Between snapshots the placer counts its own work, so a burst does not all land on one "free" slot: a model's
requests seen there are the larger of the snapshot's (busy plus queued) and this placer's own in flight, and a
cold start it sent counts as a starting instance until a snapshot shows it.
"""

import math
from dataclasses import dataclass
from typing import NamedTuple

from cirrus.placement.measured import FleetMeasures, Measured
from cirrus.placement.reported import NOTHING, Reported, group, report
from cirrus.placement.view import NodeView


@dataclass(frozen=True)
class PendingStart:
    """A cold start this placer sent to the node and no snapshot has shown yet."""

    model: str
    ready_at: float
    memory_bytes: int
    slots: int
    instances_before: int  # the model's instances in the snapshot when it was sent
    expires_at: float  # forgotten after this, shown or not (the start failed, or ended unseen)


class ModelLoad(NamedTuple):
    """One model on one node as the placer sees it: the snapshot's instances plus its own pending starts."""

    ready_slots: int
    starting_slots: int
    starting: int  # starting instances, each holding the request that started it
    pending: int  # of which this placer's own, not in the snapshot yet
    starting_since: float | None
    pending_ready_at: float  # the earliest own pending start's expected end (inf if none)
    occupied: int  # requests running or waiting there
    instances: int

    @property
    def serving(self) -> bool:
        return self.ready_slots + self.starting_slots > 0

    @property
    def on_ready(self) -> int:
        """Requests on (or waiting for) ready slots: all but those that started an instance still starting."""
        return max(0, self.occupied - self.starting)

    @property
    def free_ready(self) -> int:
        return max(0, self.ready_slots - self.on_ready)


class NodeState:
    def __init__(
        self, view: NodeView, now: float, fleet: FleetMeasures, previous: "NodeState | None" = None
    ) -> None:
        """A fresh snapshot; the previous state's requests in flight and unshown pending starts carry over."""
        self.view = view
        self.measures = Measured(view.measures, fleet)
        self.groups = group(view)
        self.reported = self._summarise(previous)
        self._snapshot_used = sum(seen.used_bytes for seen in self.reported.values())
        self.evictable_bytes = sum(seen.evictable_bytes for seen in self.reported.values())
        self.pinned_bytes = sum(seen.pinned_bytes for seen in self.reported.values())
        self.inflight: dict[str, int] = dict(previous.inflight) if previous else {}
        self.pending: list[PendingStart] = []
        self._pending_bytes = 0
        self.loads: dict[str, ModelLoad] = {}
        self.occupied_total = 0
        for start in previous.pending if previous else ():
            if now <= start.expires_at and not self._shows(start):
                self._add_pending(start)
        prior = previous if previous is not None and not previous.pending and not self.pending else None
        for model in self.reported:
            if prior is None or not self._reuse(prior, model):
                self.refresh(model)
        for model in {*view.queued, *self.inflight}:
            if model not in self.loads:
                self.refresh(model)

    def _summarise(self, previous: "NodeState | None") -> dict[str, Reported]:
        """Each model's instances, summed; a model whose instances are those of the previous snapshot keeps its
        sums (the same objects compare equal at once, so an unchanged model costs one comparison)."""
        before = previous.groups if previous is not None else {}
        reported = {}
        for model, instances in self.groups.items():
            if previous is not None and before.get(model) == instances:
                reported[model] = previous.reported[model]
            else:
                reported[model] = report(instances)
        return reported

    def _reuse(self, previous: "NodeState", model: str) -> bool:
        """Keep the previous state's load of a model whose part of the snapshot did not change."""
        load = previous.loads.get(model)
        if load is None or previous.reported.get(model) is not self.reported[model]:
            return False
        if previous.view.queued.get(model) != self.view.queued.get(model):
            return False
        self.loads[model] = load
        self.occupied_total += load.occupied
        return True

    @property
    def node_id(self) -> str:
        return self.view.node_id

    @property
    def used_bytes(self) -> int:
        return self._snapshot_used + self._pending_bytes

    @property
    def free_bytes(self) -> int:
        return max(0, self.view.budget_bytes - self.used_bytes)

    @property
    def room_bytes(self) -> int:
        """Free memory plus what stopping idle instances would give back."""
        return self.view.budget_bytes - self.used_bytes + self.evictable_bytes

    def capacity_for(self, model: str) -> int:
        """The most memory an instance of `model` could ever get here: the budget less other models' pinned ones."""
        return self.view.budget_bytes - self.pinned_bytes + self.reported.get(model, NOTHING).pinned_bytes

    def max_instances(self, model: str) -> int:
        return self.view.max_instances.get(model, 1)

    def add_inflight(self, model: str, delta: int) -> None:
        count = self.inflight.get(model, 0) + delta
        if count > 0:
            self.inflight[model] = count
        else:
            self.inflight.pop(model, None)
        self.refresh(model)

    def add_pending(self, start: PendingStart) -> None:
        self._add_pending(start)
        self.refresh(start.model)

    def _shows(self, start: PendingStart) -> bool:
        """The snapshot has an instance of the model that it did not have when the start was sent."""
        return self.reported.get(start.model, NOTHING).instances > start.instances_before

    def _add_pending(self, start: PendingStart) -> None:
        self.pending.append(start)
        self._pending_bytes += start.memory_bytes

    def refresh(self, model: str) -> ModelLoad | None:
        """Recompute one model's load from the snapshot and this placer's own work there."""
        old = self.loads.pop(model, None)
        if old is not None:
            self.occupied_total -= old.occupied
        load = self._combine(model)
        if load is not None:
            self.loads[model] = load
            self.occupied_total += load.occupied
        return load

    def _combine(self, model: str) -> ModelLoad | None:
        seen = self.reported.get(model, NOTHING)
        occupied = max(seen.busy + self.view.queued.get(model, 0), self.inflight.get(model, 0))
        mine = [start for start in self.pending if start.model == model] if self.pending else []
        if not (seen.instances or mine or occupied):
            return None
        return ModelLoad(
            seen.ready_slots,
            seen.starting_slots + sum(start.slots for start in mine),
            seen.starting + len(mine),
            len(mine),
            seen.starting_since,
            min((start.ready_at for start in mine), default=math.inf),
            occupied,
            seen.instances + len(mine),
        )
