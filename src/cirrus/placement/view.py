"""What placement reads and returns: a node's reported snapshot, what a request needs, and where it went.

A node agent reports a `NodeView` about once a second; the gateway's router turns an inference request into a
`PlacementRequest` and gets a `Placement` back. Times are on the nodes' clock (`time.time()`), which the
cluster keeps synchronised with the router's.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Rule = Literal["warm", "busy", "cached", "pull"]


@dataclass(frozen=True)
class InstanceView:
    model: str
    state: str  # "starting" | "ready" | "unresponsive" | "stopping" (only ready/starting serve)
    slots: int  # sequences it decodes at once (the model's `parallel`)
    busy: int  # slots in use (a starting instance counts the request that started it)
    memory_bytes: int
    idle_since: float | None  # None unless ready with busy == 0
    pinned: bool = False  # never evicted
    started_at: float | None = None  # when a starting instance began (its pull included); None if unknown


@dataclass(frozen=True)
class NodeMeasures:
    """What a node measured; None (or a missing model) means "not yet", and what other nodes measured stands in
    (else the placer's defaults)."""

    load_bytes_per_s: float | None = None  # weights loaded from local disk per second (cold start)
    pull_bytes_per_s: float | None = None  # registry pull bandwidth
    process_start_s: float | None = None  # starting a worker process
    cold_start_s: Mapping[str, float] = field(default_factory=dict)  # model -> last cold start here, no pull
    service_s: Mapping[str, float] = field(
        default_factory=dict
    )  # model -> mean seconds a request holds a slot


@dataclass(frozen=True)
class NodeView:
    node_id: str
    alive: bool
    budget_bytes: int
    instances: tuple[InstanceView, ...]
    cached: frozenset[str]  # model ids whose artifact is on this node's disk
    queued: Mapping[str, int]  # model id -> requests waiting in this node's pool
    measures: NodeMeasures
    max_instances: Mapping[str, int] = field(default_factory=dict)  # model -> most instances per node (1)


@dataclass(frozen=True)
class PlacementRequest:
    model: str
    memory_bytes: int  # what one instance of it needs
    artifact_bytes: int  # its weights, to load or pull
    affinity: str | None = None
    slots: int = 1  # the model's `parallel`: how many requests a new instance takes at once


@dataclass(frozen=True)
class Placement:
    node_id: str
    rule: Rule
    estimated_ttft_s: float
