"""Operator routes: which instances run (like `ollama ps`), which nodes serve, prewarm a model, unload a model.
On a cluster gateway they read and act on the cluster's nodes; on a single node, on its own pool (node `local`)."""

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Request

from cirrus.api.context import platform_of
from cirrus.api.workers_ai.schemas import envelope
from cirrus.platform import Platform

router = APIRouter(prefix="/admin", tags=["Admin"])
LOCAL_NODE = "local"


@router.get("/instances", summary="List running model instances")
async def list_instances(request: Request) -> dict[str, Any]:
    platform = platform_of(request)
    if platform.cluster is not None:
        return envelope({"instances": platform.cluster.instances()})
    pool = platform.pool
    instances = [{**asdict(status), "node": LOCAL_NODE} for status in pool.statuses()]
    return envelope(
        {
            "instances": instances,
            "memory_budget_bytes": pool.budget_bytes,
            "memory_used_bytes": pool.used_bytes(),
            "spare_workers_ready": platform.spare_workers_ready,
            "spare_worker_pids": platform.spare_worker_pids,
        }
    )


@router.get("/nodes", summary="List the nodes that serve models")
async def list_nodes(request: Request) -> dict[str, Any]:
    return envelope({"nodes": node_summaries(platform_of(request))})


def node_summaries(platform: Platform) -> list[dict[str, Any]]:
    """Each node's memory, cached models, instances and spare workers: the cluster's nodes as they last
    reported, or this one."""
    if platform.cluster is not None:
        return platform.cluster.node_summaries()
    return [_local_node(platform)]


@router.post("/models/{model:path}/load", summary="Load (prewarm) a model")
async def load_model(model: str, request: Request) -> dict[str, Any]:
    platform = platform_of(request)
    if platform.cluster is not None:
        return envelope({"instance": await platform.cluster.prewarm(platform.catalog.get(model))})
    spec = platform.catalog.require_installed(model)
    status = await platform.pool.prewarm(spec, platform.settings.worker_start_timeout_s)
    return envelope({"instance": {**asdict(status), "node": LOCAL_NODE}})


@router.post("/models/{model:path}/unload", summary="Unload a model's idle instances")
async def unload_model(model: str, request: Request) -> dict[str, Any]:
    platform = platform_of(request)
    spec = platform.catalog.get(model)
    if platform.cluster is not None:
        return envelope({"model": spec.id, "stopped": await platform.cluster.unload(spec.id)})
    return envelope({"model": spec.id, "stopped": await platform.pool.unload(spec.id)})


def _local_node(platform: Platform) -> dict[str, Any]:
    pool, catalog = platform.pool, platform.catalog
    return {
        "id": LOCAL_NODE,
        "address": platform.settings.host,
        "alive": True,
        "memory_budget_bytes": pool.budget_bytes,
        "memory_used_bytes": pool.used_bytes(),
        "cached_models": sorted(e.spec.id for e in catalog.entries() if catalog.is_present(e.spec)),
        "instances": [
            {
                "model": s.model,
                "state": s.state,
                "slots": s.parallel,
                "slots_busy": s.active_requests,
                "id": s.id,
            }
            for s in pool.statuses()
        ],
        "spare_workers_ready": platform.spare_workers_ready,
    }
