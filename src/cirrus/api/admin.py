"""Operator routes: which instances run (like `ollama ps`), prewarm a model, unload a model."""

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Request

from cirrus.api.context import platform_of
from cirrus.api.workers_ai.schemas import envelope

router = APIRouter(prefix="/admin", tags=["Admin"])


@router.get("/instances", summary="List running model instances")
async def list_instances(request: Request) -> dict[str, Any]:
    platform = platform_of(request)
    pool = platform.pool
    instances = [asdict(status) for status in pool.statuses()]
    return envelope(
        {
            "instances": instances,
            "memory_budget_bytes": pool.budget_bytes,
            "memory_used_bytes": pool.used_bytes(),
            "spare_workers_ready": platform.launcher.spares.ready,
            "spare_worker_pids": platform.launcher.spares.pids,
        }
    )


@router.post("/models/{model:path}/load", summary="Load (prewarm) a model")
async def load_model(model: str, request: Request) -> dict[str, Any]:
    platform = platform_of(request)
    spec = platform.catalog.require_installed(model)
    status = await platform.pool.prewarm(spec, platform.settings.worker_start_timeout_s)
    return envelope({"instance": asdict(status)})


@router.post("/models/{model:path}/unload", summary="Unload a model's idle instances")
async def unload_model(model: str, request: Request) -> dict[str, Any]:
    platform = platform_of(request)
    spec = platform.catalog.get(model)
    return envelope({"model": spec.id, "stopped": await platform.pool.unload(spec.id)})
