"""What sending a request to one node would lead to, by that node's pool's own rules, and how options rank.

The pool gives a request a free slot on a ready instance if it has one; else it cold-starts another instance
if the model may have one more there (fewer than max_instances, none starting) and its memory fits after
stopping idle instances; else the request waits in the model's queue.
"""

import math
from typing import NamedTuple

from cirrus.placement.estimate import Defaults, bucket, cold_start_s, pull_s, queue_wait_s, service_s
from cirrus.placement.node_state import ModelLoad, NodeState
from cirrus.placement.view import PlacementRequest, Rule

RANK: dict[Rule, int] = {"warm": 0, "busy": 1, "cached": 2, "pull": 3}
OptionKey = tuple[float, bool, int, int, str]


class Option(NamedTuple):
    node_id: str
    rule: Rule
    estimate_s: float
    evicts: bool
    load: int  # requests running or waiting on the node

    def key(self, tolerance: float) -> OptionKey:
        """Least estimated TTFT; among equal estimates: evicting nothing, starting nothing, the least loaded
        node, then the node id (so ties are decided the same way every time)."""
        return (bucket(self.estimate_s, tolerance), self.evicts, RANK[self.rule], self.load, self.node_id)


def evaluate(state: NodeState, request: PlacementRequest, now: float, defaults: Defaults) -> Option | None:
    """The node's pool's answer to the request now; None if it could neither serve, queue nor start it."""
    load = state.loads.get(request.model)
    if load is None or not load.serving:
        return cold_option(state, request, defaults) if may_add(state, request.model, load) else None
    if load.free_ready > 0:
        return Option(state.node_id, "warm", defaults.first_token_s, False, state.occupied_total)
    cold = cold_option(state, request, defaults) if may_add(state, request.model, load) else None
    if cold is not None:
        return cold
    wait = wait_s(state, request, load, now, defaults)
    return Option(state.node_id, "busy", defaults.first_token_s + wait, False, state.occupied_total)


def may_add(state: NodeState, model: str, load: ModelLoad | None) -> bool:
    """The pool may start an instance: below max_instances, and none starting (later requests queue behind)."""
    return load is None or (load.starting == 0 and load.instances < state.max_instances(model))


def cold_option(state: NodeState, request: PlacementRequest, defaults: Defaults) -> Option | None:
    need = request.memory_bytes
    if need > state.capacity_for(request.model) or need > state.room_bytes:
        return None
    measures = state.measures
    cached = request.model in state.view.cached
    estimate = cold_start_s(measures, request, defaults) + defaults.first_token_s
    if not cached:
        estimate += pull_s(measures, request, defaults)
    rule: Rule = "cached" if cached else "pull"
    return Option(state.node_id, rule, estimate, need > state.free_bytes, state.occupied_total)


def wait_s(
    state: NodeState, request: PlacementRequest, load: ModelLoad, now: float, defaults: Defaults
) -> float:
    """Until a slot frees up for the request: a busy ready slot ending, or a starting instance becoming ready."""
    service = service_s(state.measures, request.model, defaults)
    position = load.on_ready - load.ready_slots + 1
    wait = queue_wait_s(position, load.ready_slots, service)
    if load.starting:
        start_left = max(0.0, starting_ready_at(state, request, load, now, defaults) - now)
        beyond = position - (load.starting_slots - load.starting)
        after = queue_wait_s(beyond, load.ready_slots + load.starting_slots, service) if beyond > 0 else 0.0
        wait = min(wait, start_left + after)
    return wait


def starting_ready_at(
    state: NodeState, request: PlacementRequest, load: ModelLoad, now: float, defaults: Defaults
) -> float:
    """When the first starting instance should be ready: an own pending start's estimate, or the node's start
    time plus a cold start (and a pull, if the artifact is not on its disk yet)."""
    ready_at = load.pending_ready_at
    if load.starting > load.pending:
        since = load.starting_since if load.starting_since is not None else now
        measures = state.measures
        started = since + cold_start_s(measures, request, defaults)
        if request.model not in state.view.cached:
            started += pull_s(measures, request, defaults)
        ready_at = min(ready_at, started)
    return ready_at


def warm_rank(state: NodeState, model: str, now: float, defaults: Defaults) -> tuple[int, float]:
    """A node's place in its model's warm index, for finding the best few without evaluating all: free slots
    first (least busy first), then by the expected wait as of this change (on the tie grid, so that small
    changes in measured service times leave the index alone). Time passing does not move a rank; the few
    candidates taken from the top are evaluated exactly."""
    load = state.loads[model]
    if load.free_ready > 0:
        return (0, load.on_ready / max(1, load.ready_slots))
    service = service_s(state.measures, model, defaults)
    wait = queue_wait_s(load.on_ready - load.ready_slots + 1, load.ready_slots, service)
    if load.starting:
        since = load.starting_since if load.starting_since is not None else now
        measured = state.measures.cold_start_s(model)
        measured = measured if measured is not None else defaults.process_start_s
        wait = min(wait, max(0.0, min(load.pending_ready_at, since + measured) - now))
    return (1, bucket(wait, defaults.tie_tolerance) if math.isfinite(wait) else math.inf)
