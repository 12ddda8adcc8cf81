"""The placement policies bench/fleet.py compares: Cirrus's `Placer` (the real one, fed node snapshots) and the
baselines, which read the simulated nodes directly. Every policy sees the same arrivals and the same node model.

- random: a node drawn uniformly (from its own seeded generator).
- round-robin: the nodes in turn.
- least-loaded: the fewest requests outstanding (busy slots plus queued requests), then the most free memory.
  Counting busy slots alone sent every request to a node whose requests all queued for memory.
- ray-multiplex: Ray Serve's model multiplexing rule: a replica already holding the model (here: with a free
  slot, the least loaded), else the replica holding the fewest models (then the least loaded). Ray replicas unload
  their least recently used model to load another; a node here can only stop idle instances, so the fallback
  prefers nodes where the model fits that way (without that, its requests queued for minutes behind busy memory).
"""

import time
from typing import TYPE_CHECKING

import numpy as np

from bench.fleet_node import SimNode
from cirrus.placement import Placement, PlacementRequest, Placer

if TYPE_CHECKING:
    from bench.fleet_sim import Fleet

BIG = 1e13  # larger than any node's free bytes, so one float key orders by count first


class CirrusPolicy:
    name = "cirrus"

    def __init__(self) -> None:
        self.decision_us: list[float] = []
        self.decision_rules: list[str] = []
        self._sent: dict[int, tuple[PlacementRequest, Placement]] = {}

    def bind(self, fleet: "Fleet") -> None:
        self._placer = Placer(clock=lambda: fleet.now)
        self._requests = [
            PlacementRequest(model.id, model.memory_bytes, model.artifact_bytes, slots=model.slots)
            for model in fleet.workload.models
        ]
        self._index = {node.spec.id: node.spec.index for node in fleet.nodes}
        for node in fleet.nodes:
            self._placer.update(node.view())

    def choose(self, request: int, model: int) -> int:
        wanted = self._requests[model]
        started = time.perf_counter()
        placement = self._placer.choose(wanted)
        self.decision_us.append((time.perf_counter() - started) * 1e6)
        self.decision_rules.append(placement.rule)
        self._placer.placed(wanted, placement)
        self._sent[request] = (wanted, placement)
        return self._index[placement.node_id]

    def finished(self, request: int, node: int) -> None:
        self._placer.finished(*self._sent.pop(request))

    def changed(self, node: SimNode) -> None:
        self._placer.update(node.view())


class LoadArrays:
    """Busy slots, free memory and models held per node, as numpy arrays the baselines rank by."""

    def bind(self, fleet: "Fleet") -> None:
        self.nodes = fleet.nodes
        count = len(fleet.nodes)
        self.busy = np.zeros(count)  # requests outstanding: busy slots plus queued
        self.free = np.array([node.spec.budget_bytes - node.used_bytes for node in fleet.nodes], dtype=float)
        self.held = np.zeros(count)
        self.room = self.free.copy()  # free memory plus what stopping idle instances would free
        budgets = np.array([node.spec.budget_bytes for node in fleet.nodes])
        # Like any scheduler that knows the nodes' budgets, the baselines only choose nodes a model fits.
        self.too_small = [
            np.where(budgets >= model.memory_bytes, 0.0, np.inf) for model in fleet.workload.models
        ]
        self.capable = [np.flatnonzero(budgets >= model.memory_bytes) for model in fleet.workload.models]
        self.memory = [model.memory_bytes for model in fleet.workload.models]
        for node in fleet.nodes:
            self.changed(node)

    def finished(self, request: int, node: int) -> None:
        pass

    def changed(self, node: SimNode) -> None:
        index = node.spec.index
        self.busy[index] = node.busy_slots + node.queued
        self.free[index] = node.spec.budget_bytes - node.used_bytes
        self.held[index] = len(node.instances)
        self.room[index] = self.free[index] + node.idle_bytes


class RandomPolicy(LoadArrays):
    name = "random"

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed + 1)

    def choose(self, request: int, model: int) -> int:
        capable = self.capable[model]
        return int(capable[self._rng.integers(len(capable))])


class RoundRobinPolicy(LoadArrays):
    name = "round-robin"

    def __init__(self) -> None:
        self._next = 0

    def choose(self, request: int, model: int) -> int:
        """The next node in turn that the model fits."""
        for _ in range(len(self.nodes)):
            chosen = self._next % len(self.nodes)
            self._next += 1
            if self.too_small[model][chosen] == 0.0:
                return chosen
        raise RuntimeError(f"no node fits model {model}")


class LeastLoadedPolicy(LoadArrays):
    name = "least-loaded"

    def choose(self, request: int, model: int) -> int:
        return int(np.argmin(self.busy * BIG - self.free + self.too_small[model]))


class RayMultiplexPolicy(LoadArrays):
    name = "ray-multiplex"

    def bind(self, fleet: "Fleet") -> None:
        self.open_holders: dict[int, set[int]] = {}  # model -> nodes holding it with a free slot, no queue
        self._open_at: list[set[int]] = [set() for _ in fleet.nodes]
        super().bind(fleet)

    def changed(self, node: SimNode) -> None:
        super().changed(node)
        index = node.spec.index
        now_open = {
            model
            for model, group in node.instances.items()
            if not node.waiting.get(model) and any(i.busy < i.model.slots for i in group)
        }
        before = self._open_at[index]
        if now_open != before:
            for model in before - now_open:
                self.open_holders[model].discard(index)
            for model in now_open - before:
                self.open_holders.setdefault(model, set()).add(index)
            self._open_at[index] = now_open

    def choose(self, request: int, model: int) -> int:
        holders = self.open_holders.get(model)
        if holders:
            return min(holders, key=lambda index: (self.busy[index], index))
        # A Ray replica at its model limit unloads its least recently used model to load another; here a
        # node can only stop idle instances, so nodes where the model fits that way come first.
        no_room = np.where(self.room >= self.memory[model], 0.0, BIG * 1e6)
        return int(
            np.argmin(no_room + self.held * BIG * 1e3 + self.busy * BIG - self.free + self.too_small[model])
        )
