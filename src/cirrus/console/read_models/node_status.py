"""The node's status as the Overview shows it: readiness, each node's memory against its budget, instances by
model and state, requests waiting and spare workers. Read from the pool's statuses (or, on a cluster gateway,
the nodes' last reports) through Platform, never from the launcher."""

from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from typing import Any

from cirrus.observability.fleet_collector import NodeMetrics
from cirrus.platform import Platform
from cirrus.pool.instance import InstanceStatus

LOCAL_NODE = "local"


@dataclass(frozen=True)
class InstanceGroup:
    model: str
    state: str
    count: int
    memory_bytes: int
    active_requests: int
    slots: int


@dataclass(frozen=True)
class NodeMemory:
    node_id: str
    alive: bool
    budget_bytes: int
    used_bytes: int


@dataclass(frozen=True)
class NodeStatus:
    ready: bool
    installed_models: int
    nodes: list[NodeMemory]
    instances: list[InstanceGroup]
    queued: dict[str, int]  # requests waiting for an instance, by model (none listed on a cluster gateway)
    spare_workers: int

    @property
    def queue_depth(self) -> int:
        return sum(self.queued.values())

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "queue_depth": self.queue_depth}


def group_instances(statuses: list[InstanceStatus]) -> list[InstanceGroup]:
    counts: Counter[tuple[str, str]] = Counter()
    sums: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for status in statuses:
        key = (status.model, status.state)
        counts[key] += 1
        totals = sums[key]
        totals[0] += status.memory_bytes
        totals[1] += status.active_requests
        totals[2] += status.parallel
    return [
        InstanceGroup(model, state, counts[(model, state)], *sums[(model, state)])
        for model, state in sorted(counts)
    ]


def node_status(platform: Platform) -> NodeStatus:
    catalog = platform.catalog
    installed = sum(1 for entry in catalog.entries() if entry.installed)
    nodes = _nodes(platform)
    statuses = [status for node in nodes for status in node.instances]
    queued: dict[str, int] = {}
    if platform.cluster is None:
        waiting = ((entry.spec.id, platform.pool.waiting(entry.spec.id)) for entry in catalog.entries())
        queued = {model: count for model, count in waiting if count}
    return NodeStatus(
        ready=installed > 0,
        installed_models=installed,
        nodes=[NodeMemory(n.node_id, n.alive, n.budget_bytes, n.used_bytes) for n in nodes],
        instances=group_instances(statuses),
        queued=queued,
        spare_workers=platform.spare_workers_ready,
    )


def _nodes(platform: Platform) -> list[NodeMetrics]:
    if platform.cluster is not None:
        return platform.cluster.node_metrics()
    pool = platform.pool
    return [NodeMetrics(LOCAL_NODE, True, pool.budget_bytes, pool.used_bytes(), pool.statuses())]
