"""Nodes (admin): each node's memory against its budget, the models cached on it, its instances and spare
workers; on a cluster gateway, the nodes as they last reported (the same summaries as `GET /admin/nodes`)."""

from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from cirrus.api.admin import node_summaries
from cirrus.api.context import platform_of
from cirrus.auth import Permission
from cirrus.console.pages.figures import FIGURES
from cirrus.console.rendering import render
from cirrus.console.session import ConsolePrincipal, require_permission

router = APIRouter()
PAGE = "/console/nodes"


@dataclass(frozen=True)
class NodeInstance:
    model: str
    state: str
    slots: int
    slots_busy: int


@dataclass(frozen=True)
class NodeCard:
    """`reported` is False for a node that has not reported yet: only its id, address and liveness are known."""

    id: str
    address: str
    alive: bool
    reported: bool
    budget_bytes: int = 0
    used_bytes: int = 0
    cached_models: list[str] = field(default_factory=list)
    instances: list[NodeInstance] = field(default_factory=list)
    spare_workers: int = 0

    @property
    def used_share(self) -> float:
        return self.used_bytes / self.budget_bytes if self.budget_bytes else 0.0


def node_card(summary: dict[str, Any]) -> NodeCard:
    base = NodeCard(str(summary["id"]), str(summary.get("address", "")), bool(summary["alive"]), False)
    if "memory_budget_bytes" not in summary:
        return base
    instances = [
        NodeInstance(str(i["model"]), str(i["state"]), int(i["slots"]), int(i["slots_busy"]))
        for i in summary.get("instances", [])
    ]
    return NodeCard(
        base.id,
        base.address,
        base.alive,
        True,
        int(summary["memory_budget_bytes"]),
        int(summary["memory_used_bytes"]),
        list(summary.get("cached_models", [])),
        instances,
        int(summary.get("spare_workers_ready", 0)),
    )


@router.get(PAGE, response_class=HTMLResponse)
async def nodes_page(request: Request, principal: ConsolePrincipal) -> HTMLResponse:
    require_permission(principal, Permission.ADMIN)
    platform = platform_of(request)
    cards = [node_card(summary) for summary in node_summaries(platform)]
    context = {"nodes": cards, "cluster": platform.cluster is not None, "fmt": FIGURES}
    return render(request, "nodes.html", context)
