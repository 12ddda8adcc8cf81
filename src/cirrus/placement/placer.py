"""Where a request for a model should go in a cluster: the node with the least estimated time to first token.

In order of what usually wins: a warm instance with a free slot (the session's earlier node first, for its
prefix cache); a busy instance, if its queue is shorter than a cold start elsewhere; a cold start from the
node's own disk; a pull from the registry, then a cold start. A node snapshot (`update`) replaces what was known
of it; between snapshots the placer counts what it sent there itself (`placed`, `finished`).

A decision evaluates a bounded number of nodes, found through indexes (indexes.py). When none of those can
take the request and even the node with the most memory to free lacks room, the request waits for memory
there; only if something else stopped them (pinned memory, max_instances, exclusions) are all nodes evaluated.
"""

import time
from collections.abc import Callable, Collection, Iterable

from cirrus.placement.estimate import Defaults, bucket, cold_start_s, pull_s
from cirrus.placement.indexes import FleetIndex
from cirrus.placement.measured import FleetMeasures
from cirrus.placement.node_state import NodeState, PendingStart
from cirrus.placement.options import Option, evaluate
from cirrus.placement.view import NodeView, Placement, PlacementRequest
from cirrus.pool.affinity import AffinityTable

MIB = 1024 * 1024
DEFAULTS = Defaults()


class NoNodeFits(Exception):
    """No live node can ever hold the model, or every one that could was excluded."""


class Placer:
    def __init__(self, clock: Callable[[], float] = time.time, defaults: Defaults = DEFAULTS) -> None:
        self._clock = clock
        self._defaults = defaults
        self._nodes: dict[str, NodeState] = {}
        self._fleet = FleetMeasures()
        self._index = FleetIndex(self._nodes, defaults)
        self._sessions = AffinityTable(defaults.affinity_keys)  # key -> node id

    # -- what nodes report ------------------------------------------------------------------------------------

    def update(self, node: NodeView) -> None:
        """A fresh snapshot replaces what was known of that node."""
        old = self._nodes.get(node.node_id)
        now = self._clock()
        if old is None or (old.view.measures is not node.measures and old.view.measures != node.measures):
            self._fleet.learn(node.measures)  # on a change only: the fleet's figure is the last one measured
        state = NodeState(node, now, self._fleet, old)
        self._nodes[node.node_id] = state
        self._index.node_updated(old, state, now)

    def remove(self, node_id: str) -> None:
        """A node that left or died."""
        old = self._nodes.pop(node_id, None)
        if old is not None:
            self._index.node_removed(old)

    def nodes(self) -> list[NodeView]:
        return [state.view for state in self._nodes.values()]

    # -- decisions --------------------------------------------------------------------------------------------

    def choose(self, request: PlacementRequest, exclude: Collection[str] = ()) -> Placement:
        """The node with the least estimated TTFT, skipping `exclude` (nodes already tried for this request)."""
        now = self._clock()
        skip = exclude if isinstance(exclude, set | frozenset) else set(exclude)
        affine = self._affine_option(request, skip, now)
        if affine is not None and affine.rule == "warm":
            return _placement(affine)
        options = self._evaluate(request, self._index.warm(request.model, skip), now)
        best = self._best(options)
        if best is None or best.rule != "warm":
            options += self._evaluate(
                request, self._index.cold(request.model, request.memory_bytes, skip), now
            )
            best = self._best(options) or self._fallback(request, skip, now)
        if affine is not None and self._bucket(affine) <= self._bucket(best):
            return _placement(affine)
        return _placement(best)

    def estimates(self, request: PlacementRequest) -> list[Placement]:
        """Every live node's answer to the request, by evaluating each one: for explaining a decision (admin
        pages, tests), not for the request path."""
        now = self._clock()
        options = self._evaluate(request, (s.node_id for s in self._nodes.values() if s.view.alive), now)
        return [
            _placement(option)
            for option in sorted(options, key=lambda o: o.key(self._defaults.tie_tolerance))
        ]

    def placed(self, request: PlacementRequest, placement: Placement) -> None:
        """A request was sent there: count it until `finished`, and a cold start as starting until shown."""
        if request.affinity is not None:
            self._sessions.remember(request.affinity, placement.node_id)
        state = self._nodes.get(placement.node_id)
        if state is None or not state.view.alive:
            return
        state.add_inflight(request.model, 1)
        if placement.rule in ("cached", "pull"):
            state.add_pending(self._pending_start(state, request, placement))
        self._index.models_changed(state, (request.model,), self._clock())

    def finished(self, request: PlacementRequest, placement: Placement) -> None:
        """That request ended, however it ended."""
        state = self._nodes.get(placement.node_id)
        if state is None or not state.view.alive:
            return
        state.add_inflight(request.model, -1)
        self._index.models_changed(state, (request.model,), self._clock())

    # -- candidates -------------------------------------------------------------------------------------------

    def _affine_option(self, request: PlacementRequest, skip: Collection[str], now: float) -> Option | None:
        """The session's earlier node, if it still has the model warm (with room, or a queue)."""
        node_id = self._sessions.get(request.affinity) if request.affinity is not None else None
        state = self._nodes.get(node_id) if node_id is not None else None
        if state is None or not state.view.alive or state.node_id in skip:
            return None
        option = evaluate(state, request, now, self._defaults)
        return option if option is not None and option.rule in ("warm", "busy") else None

    def _evaluate(self, request: PlacementRequest, node_ids: Iterable[str], now: float) -> list[Option]:
        options = []
        for node_id in dict.fromkeys(node_ids):
            state = self._nodes[node_id]
            option = evaluate(state, request, now, self._defaults) if state.view.alive else None
            if option is not None:
                options.append(option)
        return options

    def _fallback(self, request: PlacementRequest, skip: Collection[str], now: float) -> Option:
        """No indexed candidate can take the request. If the node (of those it fits) with the most memory to free
        still lacks room, the request must wait for memory: it queues there. Otherwise something else stopped
        the candidates (pinned memory, max_instances, exclusions), and every node is evaluated."""

        def fits_ever(node_id: str) -> bool:
            return (
                node_id not in skip
                and self._nodes[node_id].capacity_for(request.model) >= request.memory_bytes
            )

        roomiest = self._index.roomiest(fits_ever, len(skip))
        if roomiest is not None and self._nodes[roomiest].room_bytes < request.memory_bytes:
            return self._memory_wait(self._nodes[roomiest], request)
        live = [state for state in self._nodes.values() if state.view.alive]
        allowed = [state for state in live if state.node_id not in skip]
        best = self._best(self._evaluate(request, (state.node_id for state in allowed), now))
        if best is not None:
            return best
        capable = [state for state in allowed if state.capacity_for(request.model) >= request.memory_bytes]
        if not capable:
            raise NoNodeFits(self._why_none_fits(request, live, allowed))
        state = min(capable, key=lambda s: (-s.room_bytes, s.occupied_total, s.node_id))
        return self._memory_wait(state, request)

    def _memory_wait(self, state: NodeState, request: PlacementRequest) -> Option:
        measures, defaults = state.measures, self._defaults
        cached = request.model in state.view.cached
        estimate = defaults.service_s + cold_start_s(measures, request, defaults) + defaults.first_token_s
        estimate += 0.0 if cached else pull_s(measures, request, defaults)
        return Option(state.node_id, "cached" if cached else "pull", estimate, True, state.occupied_total)

    def _why_none_fits(
        self, request: PlacementRequest, live: list[NodeState], allowed: list[NodeState]
    ) -> str:
        needed = f"{request.model} needs {request.memory_bytes // MIB} MiB"
        if not live:
            return f"{needed} and no node is alive"
        largest = max(live, key=lambda state: (state.capacity_for(request.model), state.node_id))
        room = largest.capacity_for(request.model)
        if room >= request.memory_bytes:
            return f"{needed}; every node that could hold it ({len(live) - len(allowed)} tried) was excluded"
        pinned = largest.view.budget_bytes - room
        return (
            f"{needed} but the largest budget of a live node is {largest.view.budget_bytes // MIB} MiB"
            f" ({largest.node_id}{f', {pinned // MIB} MiB of it pinned' if pinned else ''})"
        )

    # -- helpers ----------------------------------------------------------------------------------------------

    def _pending_start(
        self, state: NodeState, request: PlacementRequest, placement: Placement
    ) -> PendingStart:
        now = self._clock()
        ready_at = now + max(0.0, placement.estimated_ttft_s - self._defaults.first_token_s)
        reported = state.reported.get(request.model)
        return PendingStart(
            model=request.model,
            ready_at=ready_at,
            memory_bytes=request.memory_bytes,
            slots=request.slots,
            instances_before=reported.instances if reported else 0,
            expires_at=ready_at + self._defaults.pending_grace_s,
        )

    def _best(self, options: list[Option]) -> Option | None:
        tolerance = self._defaults.tie_tolerance
        return min(options, key=lambda option: option.key(tolerance), default=None)

    def _bucket(self, option: Option) -> float:
        return bucket(option.estimate_s, self._defaults.tie_tolerance)


def _placement(option: Option) -> Placement:
    return Placement(option.node_id, option.rule, option.estimate_s)
