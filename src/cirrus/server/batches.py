"""The batch runner of a gateway: started with the app, stopped before the platform closes, so items in flight
go back to the queue (another gateway, or this one after a restart, runs them)."""

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import AsyncIterator

from fastapi import FastAPI

from cirrus.api.openai import batch_shapes as openai_batches
from cirrus.api.openai.batch_items import OpenAiItems
from cirrus.api.workers_ai.batch import SHAPE
from cirrus.api.workers_ai.batch_items import WorkersAiItems
from cirrus.batches import Claim, ItemState
from cirrus.batches.runner import BatchRunner, Execute, Outcome, Preempt, RunnerSettings
from cirrus.platform import Platform


def by_shape(executors: dict[str, Execute]) -> Execute:
    """Each item runs as the API that queued its batch answers (`Batch.shape`)."""

    async def execute(claim: Claim, preempt: Preempt) -> Outcome:
        executor = executors.get(claim.batch.shape)
        if executor is None:
            message = f"no runner for batches of shape {claim.batch.shape!r}"
            return Outcome(ItemState.FAILED, error={"code": 3000, "message": message})
        return await executor(claim, preempt)

    return execute


def runner_settings(platform: Platform) -> RunnerSettings:
    settings = platform.settings
    return RunnerSettings(
        concurrency=settings.batch_concurrency,
        lease_s=settings.batch_lease_s,
        keep_s=settings.batch_retention_days * 86_400.0,
    )


@contextlib.asynccontextmanager
async def running_batches(app: FastAPI, platform: Platform) -> AsyncIterator[None]:
    if not platform.gateway_open:
        yield
        return
    holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    executors: dict[str, Execute] = {
        SHAPE: WorkersAiItems(platform).execute,
        openai_batches.SHAPE: OpenAiItems(platform).execute,
    }
    runner = BatchRunner(platform.gateway.batches, by_shape(executors), holder, runner_settings(platform))
    app.state.batch_runner = runner
    task = asyncio.create_task(runner.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
