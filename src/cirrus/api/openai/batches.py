"""OpenAI's Batch API on Cirrus's batch engine: `POST /v1/batches` (an uploaded JSONL file of requests to one
endpoint), `GET /v1/batches/{id}`, `POST /v1/batches/{id}/cancel` and `GET /v1/batches` (newest first).

Every line of the input file is checked before anything is queued (batch_lines.py), so a bad line is a 400
naming it. A batch may mix models: each line's body names its own, so the batch is stored without one, its
endpoint and input file in its metadata. Its items run as their route would answer them (batch_items.py); its
output and error files are made from them (batch_output.py). A batch acts for its token's account: another
account's batch is not found.
"""

import contextlib
from functools import partial
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from cirrus.api.context import platform_of, principal_of, run_account
from cirrus.api.inference import gateway_call
from cirrus.api.openai.batch_lines import checked_lines
from cirrus.api.openai.batch_output import settled_files
from cirrus.api.openai.batch_shapes import (
    BATCH_PURPOSE,
    OUTPUT_PURPOSE,
    SHAPE,
    BatchFiles,
    batch_object,
    error_file_id,
    output_file_id,
    page_object,
)
from cirrus.api.openai.files import file_content, visible_file
from cirrus.api.path_parameters import add_openai_route
from cirrus.batches import Batch, BatchStore, NewItem
from cirrus.errors import CapacityExceeded, InvalidInput, NotFound
from cirrus.files import MadeFile
from cirrus.platform import Platform

router = APIRouter(tags=["OpenAI"])
MetadataKey = Annotated[str, StringConstraints(max_length=64)]
MetadataValue = Annotated[str, StringConstraints(max_length=512)]


class CreateBatch(BaseModel):
    model_config = ConfigDict(extra="ignore")

    input_file_id: str = Field(min_length=1)
    endpoint: Literal["/v1/chat/completions", "/v1/completions", "/v1/embeddings"]
    completion_window: Literal["24h"]
    metadata: dict[MetadataKey, MetadataValue] | None = Field(default=None, max_length=16)


async def create_batch(body: CreateBatch, request: Request) -> Any:
    account = run_account(request)
    platform = platform_of(request)
    text = await _input_text(platform, account, body.input_file_id)
    resolve = partial(platform.pipeline.resolve, gateway_call(request, stream=False))
    items = checked_lines(text, body.endpoint, platform.settings.batch_max_items, resolve)
    await _check_room(platform, account, items)
    metadata = {"endpoint": body.endpoint, "input_file_id": body.input_file_id, "metadata": body.metadata}
    store = platform.gateway.batches
    token_id = principal_of(request).token_id
    batch = await store.create(
        account, token_id, "", SHAPE, items, platform.settings.batch_window_s, metadata
    )
    await _add_files(platform, batch)
    runner = getattr(request.app.state, "batch_runner", None)
    if runner is not None:
        runner.poke()
    return batch_object(batch, BatchFiles())


async def _input_text(platform: Platform, account: str, file_id: str) -> str:
    try:
        stored = await visible_file(platform, account, file_id)
    except NotFound:
        raise NotFound(f"No such File object: {file_id}", param="input_file_id") from None
    if stored.purpose != BATCH_PURPOSE:
        raise InvalidInput(
            f"the file {file_id} has purpose {stored.purpose!r}; a batch reads a file uploaded with purpose "
            f"{BATCH_PURPOSE!r}",
            param="input_file_id",
        )
    return await file_content(platform, account, stored)


async def _check_room(platform: Platform, account: str, items: list[NewItem]) -> None:
    limit = platform.settings.batch_max_queued_per_account
    queued = await platform.gateway.batches.queued_items(account)
    if queued + len(items) > limit:
        raise CapacityExceeded(
            f"the account has {queued} batch requests waiting; {len(items)} more would pass its limit of {limit}",
            retry_after_s=60.0,
        )


async def _add_files(platform: Platform, batch: Batch) -> None:
    """The batch's output and error files, pending until it finishes; without them its results could never be
    read, so a batch whose files could not be written is cancelled."""
    made = [
        MadeFile(output_file_id(batch.id), OUTPUT_PURPOSE, f"{batch.id}_output.jsonl"),
        MadeFile(error_file_id(batch.id), OUTPUT_PURPOSE, f"{batch.id}_error.jsonl"),
    ]
    expires_at = batch.created_at + platform.settings.batch_retention_days * 86_400.0
    try:
        await platform.gateway.files.add_pending(batch.account_id, batch.id, made, expires_at)
    except BaseException:
        with contextlib.suppress(Exception):
            await platform.gateway.batches.cancel(batch.account_id, batch.id)
        raise


async def _batch(store: BatchStore, account: str, batch_id: str) -> Batch:
    batch = await store.get(account, batch_id)
    if batch is None or batch.shape != SHAPE:
        raise NotFound(f"No batch found with id '{batch_id}'.", param="batch_id")
    return batch


async def _answer(platform: Platform, batch: Batch) -> dict[str, Any]:
    gateway = platform.gateway
    return batch_object(batch, await settled_files(gateway.files, gateway.batches, batch))


async def retrieve_batch(batch_id: str, request: Request) -> Any:
    platform = platform_of(request)
    return await _answer(platform, await _batch(platform.gateway.batches, run_account(request), batch_id))


async def cancel_batch(batch_id: str, request: Request) -> Any:
    """Queued items are cancelled at once; running ones finish, the batch reading `cancelling` until they have."""
    platform, account = platform_of(request), run_account(request)
    store = platform.gateway.batches
    await _batch(store, account, batch_id)
    cancelled = await store.cancel(account, batch_id)
    if cancelled is None:  # purged in between
        raise NotFound(f"No batch found with id '{batch_id}'.", param="batch_id")
    return await _answer(platform, cancelled)


async def list_batches(
    request: Request, after: str | None = None, limit: int = Query(default=20, ge=1, le=100)
) -> Any:
    platform, account = platform_of(request), run_account(request)
    found = await _openai_batches(platform.gateway.batches, account, limit + 1, after)
    return page_object([await _answer(platform, batch) for batch in found[:limit]], len(found) > limit)


async def _openai_batches(store: BatchStore, account: str, wanted: int, after: str | None) -> list[Batch]:
    """Newest first, after `after`; the store lists every shape's batches, so pages are read until enough."""
    found: list[Batch] = []
    while len(found) < wanted:
        page = await store.list(account, wanted, after)
        found += [batch for batch in page if batch.shape == SHAPE]
        if len(page) < wanted:
            break
        after = page[-1].id
    return found[:wanted]


add_openai_route(router, "/batches", create_batch, "POST", "Create a batch (OpenAI)")
add_openai_route(router, "/batches", list_batches, "GET", "List batches")
add_openai_route(router, "/batches/{batch_id}", retrieve_batch, "GET", "Get a batch")
add_openai_route(router, "/batches/{batch_id}/cancel", cancel_batch, "POST", "Cancel a batch")
