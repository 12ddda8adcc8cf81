"""Which nodes a decision looks at, so that it evaluates a few rather than every node of a large fleet.

Kept up to date as snapshots and placements arrive: per model, its warm nodes ranked by how soon a slot frees
and the nodes caching its artifact; and every live node by free memory and by memory it could free (free
plus idle instances).
"""

from collections.abc import Callable, Collection, Iterable, Mapping

from cirrus.placement.estimate import Defaults
from cirrus.placement.node_state import NodeState
from cirrus.placement.options import warm_rank
from cirrus.placement.ranked import RankedSet, RotatingSet

WARM_LOOK = 4  # warm nodes evaluated per decision, best ranked first
COLD_LOOK = 8  # nodes evaluated from each memory index, and from a model's cached nodes in turn
ALL_CACHED = 16  # a model cached on at most this many nodes has every one of them evaluated


class FleetIndex:
    def __init__(self, nodes: Mapping[str, NodeState], defaults: Defaults) -> None:
        self._nodes = nodes
        self._defaults = defaults
        self._warm: dict[str, RankedSet] = {}
        self._cached: dict[str, RotatingSet] = {}
        self._by_free = RankedSet()
        self._by_room = RankedSet()

    # -- keeping up -------------------------------------------------------------------------------------------

    def node_updated(self, old: NodeState | None, state: NodeState, now: float) -> None:
        if not state.view.alive:
            for gone in (old, state):
                if gone is not None:
                    self.node_removed(gone)
            return
        self._index_cached(old, state)
        self.models_changed(state, _changed_models(old, state), now)

    def models_changed(self, state: NodeState, models: Iterable[str], now: float) -> None:
        node_id = state.node_id
        for model in models:
            load = state.loads.get(model)
            if load is not None and load.serving:
                rank = warm_rank(state, model, now, self._defaults)
                self._warm.setdefault(model, RankedSet()).set(node_id, rank)
            elif model in self._warm:
                self._warm[model].discard(node_id)
        self._by_free.set(node_id, (-state.free_bytes, state.occupied_total))
        self._by_room.set(node_id, (-state.room_bytes, state.occupied_total))

    def node_removed(self, state: NodeState) -> None:
        node_id = state.node_id
        for model in state.view.cached:
            if model in self._cached:
                self._cached[model].discard(node_id)
        for model in state.loads:
            if model in self._warm:
                self._warm[model].discard(node_id)
        self._by_free.discard(node_id)
        self._by_room.discard(node_id)

    def _index_cached(self, old: NodeState | None, state: NodeState) -> None:
        before = old.view.cached if old is not None and old.view.alive else frozenset()
        after = state.view.cached
        if before == after:
            return
        for model in before - after:
            self._cached[model].discard(state.node_id)
        for model in after - before:
            self._cached.setdefault(model, RotatingSet()).add(state.node_id)

    # -- looking up -------------------------------------------------------------------------------------------

    def warm(self, model: str, skip: Collection[str]) -> list[str]:
        """The best ranked few nodes where the model has instances."""
        ranked = self._warm.get(model)
        if ranked is None:
            return []
        return ranked.smallest(WARM_LOOK, _not_in(skip), WARM_LOOK + len(skip))

    def cold(self, model: str, memory_bytes: int, skip: Collection[str]) -> list[str]:
        """Nodes that could start the model: those caching it (all, or a few in turn), those with the most free
        memory, and, if even the freest cannot start it without evicting, those with the most memory to free."""
        allowed = _not_in(skip)
        cached = self._cached.get(model, RotatingSet())
        found = list(cached) if len(cached) <= ALL_CACHED else cached.next_few(COLD_LOOK)
        freest = self._by_free.smallest(COLD_LOOK, allowed, COLD_LOOK + len(skip))
        found += freest
        if not freest or self._nodes[freest[0]].free_bytes < memory_bytes:
            found += self._by_room.smallest(COLD_LOOK, allowed, COLD_LOOK + len(skip))
        return [node_id for node_id in found if node_id not in skip]

    def roomiest(self, accept: Callable[[str], bool], skipped: int) -> str | None:
        """The accepted node with the most memory free or freeable, among the first few looked at."""
        found = self._by_room.smallest(1, accept, 4 * COLD_LOOK + skipped)
        return found[0] if found else None


def _not_in(skip: Collection[str]) -> Callable[[str], bool]:
    return lambda node_id: node_id not in skip


def _changed_models(old: NodeState | None, new: NodeState) -> list[str]:
    """Models whose place in the warm index may have moved: their load changed, or (new measures) they have no
    free slot, so their rank is a wait that depends on the measured service time."""
    if old is None:
        return list(new.loads)
    remeasured = old.view.measures is not new.view.measures and old.view.measures != new.view.measures
    changed = [model for model in old.loads if model not in new.loads]
    for model, load in new.loads.items():
        before = old.loads.get(model)
        if (before is not load and before != load) or (remeasured and load.free_ready == 0):
            changed.append(model)
    return changed
