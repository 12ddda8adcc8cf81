"""What a node agent tells gateways about its node: the placement view (`cirrus.placement.view.NodeView`) plus
what operators see in `GET /admin/nodes`. Built from the node's pool and launcher; no Ray import."""

import os
from dataclasses import dataclass, field

from cirrus.catalog import Catalog
from cirrus.placement.view import InstanceView, NodeMeasures, NodeView
from cirrus.pool import Pool
from cirrus.pool.instance import InstanceStatus
from cirrus.pool.launcher import ProcessLauncher

SERVING_STATES = (
    "ready",
    "starting",
)  # what placement may count on; unresponsive and stopping instances are not


@dataclass(frozen=True)
class NodeReport:
    view: NodeView
    address: str
    used_bytes: int
    instances: list[InstanceStatus]
    # model id -> (an instance's memory, the weights' bytes), as this node estimated them
    sizes: dict[str, tuple[int, int]] = field(default_factory=dict)
    spares_ready: int = 0
    agent_pid: int = 0


@dataclass
class ServiceTimes:
    """How long one request holds a slot, per model: an exponentially weighted mean, for queue-wait estimates."""

    weight: float = 0.2
    means: dict[str, float] = field(default_factory=dict)

    def add(self, model: str, seconds: float) -> None:
        mean = self.means.get(model)
        self.means[model] = seconds if mean is None else mean + self.weight * (seconds - mean)


@dataclass
class NodeSources:
    """What a report is read from."""

    node_id: str
    address: str
    catalog: Catalog
    pool: Pool
    launcher: ProcessLauncher
    service_times: ServiceTimes


def instance_view(status: InstanceStatus) -> InstanceView:
    return InstanceView(
        model=status.model,
        state=status.state,
        slots=status.parallel,
        busy=status.active_requests,
        memory_bytes=status.memory_bytes,
        idle_since=status.idle_since,
        pinned=status.pinned,
        started_at=status.started_at if status.state == "starting" else None,
    )


def measures(statuses: list[InstanceStatus], sources: NodeSources) -> NodeMeasures:
    """Cold starts and load rates from the instances this node started; pull rate from its last pull."""
    sizes = sources.launcher.known_sizes()
    loaded = [s for s in statuses if s.state == "ready" and s.load_s > 0]
    cold_start_s = {s.model: s.load_s + s.cold_start_phases.get("process_s", 0.0) for s in loaded}
    rates = [sizes[s.model][1] / s.load_s for s in loaded if s.model in sizes]
    starts = [s.cold_start_phases["process_s"] for s in loaded if "process_s" in s.cold_start_phases]
    return NodeMeasures(
        load_bytes_per_s=max(rates) if rates else None,
        pull_bytes_per_s=sources.launcher.pull_bytes_per_s,
        process_start_s=min(starts) if starts else None,
        cold_start_s=cold_start_s,
        service_s=dict(sources.service_times.means),
    )


def node_report(sources: NodeSources) -> NodeReport:
    pool, catalog = sources.pool, sources.catalog
    statuses = pool.statuses()
    specs = catalog.specs()  # polled twice a second: only `is_present` below looks at the disk
    view = NodeView(
        node_id=sources.node_id,
        alive=True,
        budget_bytes=pool.budget_bytes,
        instances=tuple(instance_view(s) for s in statuses),  # every state: stopping ones still hold memory
        cached=frozenset(spec.id for spec in specs if catalog.is_present(spec)),
        queued={spec.id: pool.waiting(spec.id) for spec in specs if pool.waiting(spec.id)},
        measures=measures(statuses, sources),
        max_instances={spec.id: spec.max_instances for spec in specs},
    )
    return NodeReport(
        view=view,
        address=sources.address,
        used_bytes=pool.used_bytes(),
        instances=statuses,
        sizes=sources.launcher.known_sizes(),
        spares_ready=sources.launcher.spares.ready,
        agent_pid=os.getpid(),
    )
