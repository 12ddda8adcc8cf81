"""A gateway's cluster: the fleet of nodes, the placer, the backend that runs requests on them, and what operators
see of it. `cirrus serve --cluster ADDRESS` opens one; the single-node path never imports it."""

import asyncio
import os
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from cirrus.catalog import Catalog, ModelSpec
from cirrus.cluster import ray_calls
from cirrus.cluster.fleet import Fleet, Node
from cirrus.cluster.report import NodeReport
from cirrus.cluster.service import ClusterService
from cirrus.errors import NoNodeAvailable
from cirrus.observability.fleet_collector import NodeMetrics
from cirrus.placement.placer import Placer
from cirrus.store.gguf import MetaValue


def cluster_address(address: str) -> str:
    """`auto` means Ray's own RAY_ADDRESS (what `ray start --head` prints and a Ray job sets)."""
    if address == "auto":
        found = os.environ.get("RAY_ADDRESS")
        if not found:
            raise ValueError("--cluster auto needs RAY_ADDRESS (the head's HOST:PORT)")
        return found
    return address


class ClusterModelFiles:
    """What the gateway's chat-family lookup reads of a model's file, asked of a node that has it."""

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet
        self._known: dict[str, dict[str, MetaValue]] = {}

    async def metadata(self, spec: ModelSpec) -> dict[str, MetaValue]:
        if spec.id not in self._known:
            node = self._holder(spec)
            template: dict[str, MetaValue] = await ray_calls.call(
                node.agent.chat_template.remote(spec.id), 60
            )
            self._known[spec.id] = template
        return self._known[spec.id]

    def _holder(self, spec: ModelSpec) -> Node:
        nodes = [node for node in self._fleet.nodes() if node.placeable]
        holding = [node for node in nodes if node.report and spec.id in node.report.view.cached]
        if not (holding or nodes):
            raise NoNodeAvailable("no node of the cluster is available", retry_after_s=1.0)
        return (holding or nodes)[0]


class Cluster:
    def __init__(
        self, address: str, catalog: Catalog, request_timeout_s: float, node_ip: str | None = None
    ) -> None:
        self.placer = Placer()
        self.fleet = Fleet(cluster_address(address), self.placer, node_ip)
        self.service = ClusterService(catalog, self.fleet, request_timeout_s)
        self.model_files = ClusterModelFiles(self.fleet)
        self._catalog = catalog

    async def start(self) -> None:
        await self.fleet.start()

    async def close(self) -> None:
        await self.fleet.close()

    def node_summaries(self) -> list[dict[str, Any]]:
        """What `GET /admin/nodes` shows of each node."""
        return [_summary(node) for node in self.fleet.nodes()]

    def node_metrics(self) -> list[NodeMetrics]:
        return [
            NodeMetrics(
                node.node_id, not node.lost.is_set(), node.report.view.budget_bytes, node.report.used_bytes,
                node.report.instances,
            )
            for node in self.fleet.nodes()
            if node.report is not None
        ]  # fmt: skip

    def on_placed(self, observe: Callable[[str, str, str], None]) -> None:
        self.service.on_placed = observe

    def instances(self) -> list[dict[str, Any]]:
        return [
            {**asdict(status), "node": node.node_id}
            for node in self.fleet.nodes()
            if node.report is not None
            for status in node.report.instances
        ]

    async def prewarm(self, spec: ModelSpec) -> dict[str, Any]:
        wanted = self.service.placement_request(spec, None)
        placement = self.placer.choose(wanted)
        node = self.fleet.node(placement.node_id)
        status: dict[str, Any] = await ray_calls.call(node.agent.prewarm.remote(spec.id))
        return {**status, "node": node.node_id}

    async def unload(self, model: str) -> int:
        counts: list[int | BaseException] = await asyncio.gather(
            *(ray_calls.call(node.agent.unload.remote(model), 30) for node in self.fleet.nodes()),
            return_exceptions=True,
        )
        return sum(count for count in counts if isinstance(count, int))


def _summary(node: Node) -> dict[str, Any]:
    report: NodeReport | None = node.report
    summary: dict[str, Any] = {"id": node.node_id, "address": node.address, "alive": not node.lost.is_set()}
    if report is None:
        return summary
    return {
        **summary,
        "memory_budget_bytes": report.view.budget_bytes,
        "memory_used_bytes": report.used_bytes,
        "cached_models": sorted(report.view.cached),
        "instances": [
            {
                "model": i.model,
                "state": i.state,
                "slots": i.parallel,
                "slots_busy": i.active_requests,
                "id": i.id,
            }
            for i in report.instances
        ],
        "spare_workers_ready": report.spares_ready,
        "agent_pid": report.agent_pid,
    }
