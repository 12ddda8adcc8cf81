"""The AI Search ingest runner of a gateway: started with the app, stopped before the platform closes, so files
being indexed go back to the queue (another gateway, or this one after a restart, indexes them).

Its embedding calls are background work on the gateway's pipeline, for the token that uploaded the file: they
take only slots nothing interactive wants and give them back when an interactive request needs one (the call is
then stopped, recorded at no cost, and the file retried), so indexing a corpus does not slow the chats beside it.
"""

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import AsyncIterator

from fastapi import FastAPI

from cirrus.api.batch_calls import token_principal
from cirrus.errors import CapacityExceeded
from cirrus.gateway.call import Call
from cirrus.platform import Platform
from cirrus.rag.ingest import Embed, IngestRunner, IngestSettings
from cirrus.rag.model import Item
from cirrus.runtime.embedding import EmbeddingInput
from cirrus.service import EmbeddingRequest

ROUTE = "ai-search"


def background_embed(platform: Platform) -> Embed:
    async def embed(item: Item, model: str, texts: list[str]) -> list[list[float]]:
        call = Call(
            request_id=f"ai-search/{item.id}/{uuid.uuid4().hex[:8]}",
            principal=await token_principal(platform, item.token_id, "uploaded this file"),
            route=ROUTE,
            headers={},
            deadline=asyncio.get_running_loop().time() + platform.settings.batch_item_timeout_s,
        )
        return await _preemptible(platform, call, model, texts)

    return embed


async def _preemptible(platform: Platform, call: Call, model: str, texts: list[str]) -> list[list[float]]:
    """The vectors, or CapacityExceeded (a transient refusal: the file is retried) when an interactive request
    took the slot back."""
    spec = platform.pipeline.resolve(call, model)
    preempted = asyncio.Event()

    def preempt() -> None:
        call.waived = True
        preempted.set()
        work.cancel()

    embedding = EmbeddingRequest(
        call.request_id, spec.id, EmbeddingInput(tuple(texts), "text"), None, call.deadline, preempt
    )
    work = asyncio.ensure_future(platform.pipeline.embed(call, embedding))
    try:
        result = await work
    except asyncio.CancelledError:
        if not preempted.is_set():
            raise
        raise CapacityExceeded("an interactive request took the slot back", retry_after_s=1.0) from None
    return result.vectors


def ingest_settings(platform: Platform) -> IngestSettings:
    settings = platform.settings
    return IngestSettings(
        concurrency=settings.ai_search_ingest_concurrency, lease_s=settings.ai_search_lease_s
    )


@contextlib.asynccontextmanager
async def running_ingest(app: FastAPI, platform: Platform) -> AsyncIterator[None]:
    store = platform.gateway.rag if platform.gateway_open else None
    if store is None:
        yield
        return
    holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    runner = IngestRunner(store, store.index, background_embed(platform), holder, ingest_settings(platform))
    app.state.rag_runner = runner
    task = asyncio.create_task(runner.run())
    try:
        yield
    finally:
        await runner.stop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
