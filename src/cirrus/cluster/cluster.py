"""A gateway's cluster: the fleet of nodes, the placer, the backend that runs requests on them, and what operators
see of it. `cirrus serve --cluster ADDRESS` opens one; the single-node path never imports it."""

import asyncio
import os
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Any, TypeVar

from cirrus.catalog import Catalog, ModelSpec
from cirrus.cluster import ray_calls
from cirrus.cluster.fleet import Fleet, Node
from cirrus.cluster.remote import NodeLost
from cirrus.cluster.report import NodeReport
from cirrus.cluster.service import ClusterService
from cirrus.errors import ModelNotInstalled, NoNodeAvailable
from cirrus.observability.fleet_collector import NodeMetrics
from cirrus.placement.placer import NoNodeFits, Placer
from cirrus.store.gguf import MetaValue

T = TypeVar("T")
METADATA_TIMEOUT_S = 60.0  # reading a GGUF's metadata walks its vocabulary: a big model's takes seconds
PREWARM_TIMEOUT_S = 600.0  # a cold start, pull included


def cluster_address(address: str) -> str:
    """`auto` means Ray's own RAY_ADDRESS (what `ray start --head` prints and a Ray job sets)."""
    if address == "auto":
        found = os.environ.get("RAY_ADDRESS")
        if not found:
            raise ValueError("--cluster auto needs RAY_ADDRESS (the head's HOST:PORT)")
        return found
    return address


async def asked(work: Awaitable[T], timeout_s: float, whom: str) -> T:
    """An agent's answer; a node that does not give one is a 503 the caller may retry."""
    try:
        return await ray_calls.call(work, timeout_s)
    except NodeLost as error:
        raise NoNodeAvailable(f"{whom} did not answer", retry_after_s=1.0) from error


class ClusterModelFiles:
    """What the gateway's chat-family lookup reads of a model's file, asked of a node that holds it. A model no
    live node holds reads as not installed, so the lookup moves on to its fallbacks rather than pull it anywhere."""

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet
        self._known: dict[str, dict[str, MetaValue]] = {}

    async def metadata(self, spec: ModelSpec) -> dict[str, MetaValue]:
        if spec.id not in self._known:
            node = self._holder(spec)
            work: Any = node.agent.chat_template.remote(spec.id)
            template: dict[str, MetaValue] = await asked(
                work, METADATA_TIMEOUT_S, f"the node holding {spec.id}"
            )
            self._known[spec.id] = template
        return self._known[spec.id]

    def _holder(self, spec: ModelSpec) -> Node:
        for node in self._fleet.nodes():
            if node.placeable and node.report is not None and spec.id in node.report.view.cached:
                return node
        raise ModelNotInstalled(f"no node of the cluster holds {spec.id} yet", param="model")


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
        """Start an instance where a request for the model would go now."""
        wanted = self.service.placement_request(spec, None)
        try:
            placement = self.placer.choose(wanted)
        except NoNodeFits as error:
            raise NoNodeAvailable(
                f"no node of the cluster can take {spec.id} now", retry_after_s=1.0
            ) from error
        node = self.fleet.placeable(placement.node_id)
        if node is None:
            raise NoNodeAvailable(f"the node chosen for {spec.id} just left", retry_after_s=1.0)
        work: Any = node.agent.prewarm.remote(spec.id)
        status: dict[str, Any] = await asked(work, PREWARM_TIMEOUT_S, f"the node chosen for {spec.id}")
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
