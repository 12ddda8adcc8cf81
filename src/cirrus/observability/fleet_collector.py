"""Gauges of a cluster's nodes, read from the gateway's latest node reports when Prometheus scrapes: the single
node's pool gauges, each with a `node` label, plus how many nodes are alive."""

import logging
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric

from cirrus.pool.instance import InstanceStatus

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeMetrics:
    node_id: str
    alive: bool
    budget_bytes: int
    used_bytes: int
    instances: list[InstanceStatus]


FleetSource = Callable[[], list[NodeMetrics]]


class FleetCollector:
    def __init__(self, source: FleetSource) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        try:
            families = _families(self._source())
        except Exception:  # a broken reading must not take the request metrics down with it
            log.exception("could not read the cluster's nodes for metrics")
            return iter(())
        return iter(families)


def _families(nodes: list[NodeMetrics]) -> list[Metric]:
    alive = GaugeMetricFamily("cirrus_nodes", "Cluster nodes by liveness", labels=["alive"])
    for state, count in sorted(Counter("true" if n.alive else "false" for n in nodes).items()):
        alive.add_metric([state], count)
    return [
        alive,
        _per_node(
            "cirrus_memory_budget_bytes", "Memory a node's pool may use", nodes, lambda n: n.budget_bytes
        ),
        _per_node(
            "cirrus_memory_used_bytes",
            "Estimated memory of a node's instances",
            nodes,
            lambda n: n.used_bytes,
        ),
        _instances(nodes),
        _active_requests(nodes),
    ]


def _per_node(
    name: str, documentation: str, nodes: list[NodeMetrics], value: Callable[[NodeMetrics], int]
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=["node"])
    for node in nodes:
        family.add_metric([node.node_id], value(node))
    return family


def _instances(nodes: list[NodeMetrics]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(
        "cirrus_instances", "Model instances by node and state", labels=["node", "model", "state"]
    )
    for node in nodes:
        for (model, state), count in sorted(Counter((s.model, s.state) for s in node.instances).items()):
            family.add_metric([node.node_id, model, state], count)
    return family


def _active_requests(nodes: list[NodeMetrics]) -> GaugeMetricFamily:
    family = GaugeMetricFamily("cirrus_active_requests", "Requests being generated", labels=["node", "model"])
    for node in nodes:
        active: Counter[str] = Counter()
        for status in node.instances:
            active[status.model] += status.active_requests
        for model, count in sorted(active.items()):
            family.add_metric([node.node_id, model], count)
    return family
