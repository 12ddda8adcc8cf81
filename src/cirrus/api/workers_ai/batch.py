"""Workers AI's async Batch API on `/ai/run/{model}?queueRequest=true`: a body of `{"requests": [...]}` queues a
batch and answers at once with its `request_id`; a body of `{"request_id": ...}` polls it: `queued` or `running`
with how many items are done, then the `responses` (one per request, by position, with its
`external_reference`) and the summed `usage`.

Every request is checked as `/ai/run` would check it before anything is queued, so a bad item is a 400 naming it,
not a failure found hours later. A batch acts for the account of the token that sent it: another account's
`request_id` is not found.
"""

from typing import Any

from fastapi import Request

from cirrus.api.context import principal_of
from cirrus.api.workers_ai.inputs import task_input
from cirrus.api.workers_ai.schemas import envelope
from cirrus.batches import Batch, BatchItem, BatchStore, ItemState, NewItem
from cirrus.catalog import ModelSpec
from cirrus.errors import CapacityExceeded, InvalidInput, NotFound
from cirrus.platform import Platform

SHAPE = "workers-ai"


def batch_store(platform: Platform) -> BatchStore:
    return platform.gateway.batches


async def queue_or_poll(request: Request, platform: Platform, spec: ModelSpec, body: dict[str, Any]) -> Any:
    if "request_id" in body:
        return await _poll(request, platform, spec, body["request_id"])
    return await _queue(request, platform, spec, body)


async def _queue(request: Request, platform: Platform, spec: ModelSpec, body: dict[str, Any]) -> Any:
    items = _checked_items(spec, body.get("requests"), platform.settings.batch_max_items)
    principal = principal_of(request)
    store = batch_store(platform)
    queued = await store.queued_items(principal.account_id)
    if queued + len(items) > platform.settings.batch_max_queued_per_account:
        raise CapacityExceeded(
            f"the account has {queued} batch requests waiting; {len(items)} more would pass its limit of "
            f"{platform.settings.batch_max_queued_per_account}",
            retry_after_s=60.0,
        )
    window = platform.settings.batch_window_s
    batch = await store.create(principal.account_id, principal.token_id, spec.id, SHAPE, items, window, {})
    runner = getattr(request.app.state, "batch_runner", None)
    if runner is not None:
        runner.poke()
    return envelope({"status": "queued", "request_id": batch.id, "model": spec.id})


def _checked_items(spec: ModelSpec, requests: Any, limit: int) -> list[NewItem]:
    if not isinstance(requests, list) or not requests:
        raise InvalidInput(
            "a queued request needs 'requests', a non-empty list of inputs (or 'request_id' to poll one)",
            param="requests",
        )
    if len(requests) > limit:
        message = f"'requests' has {len(requests)} items; a batch holds at most {limit}"
        raise InvalidInput(message, param="requests")
    return [_checked_item(spec, index, item) for index, item in enumerate(requests)]


def _checked_item(spec: ModelSpec, index: int, item: Any) -> NewItem:
    where = f"requests[{index}]"
    if not isinstance(item, dict):
        raise InvalidInput(f"'{where}' must be an object: the input of one request", param=where)
    body = {key: value for key, value in item.items() if key != "external_reference"}
    if body.get("stream") is True:
        raise InvalidInput(f"'{where}.stream': a queued request cannot stream", param=f"{where}.stream")
    reference = item.get("external_reference")
    if reference is not None and not isinstance(reference, str):
        raise InvalidInput(
            f"'{where}.external_reference' must be a string", param=f"{where}.external_reference"
        )
    try:
        task_input(spec, body)
    except InvalidInput as error:
        param = f"{where}.{error.param}" if error.param else where
        raise InvalidInput(f"{where}: {error.message}", param=param) from None
    return NewItem(body, reference)


async def _poll(request: Request, platform: Platform, spec: ModelSpec, request_id: Any) -> Any:
    store = batch_store(platform)
    batch = await store.get(principal_of(request).account_id, str(request_id))
    if batch is None or batch.model != spec.id or batch.shape != SHAPE:
        raise NotFound(f"No batch with request_id '{request_id}' for {spec.id}.", param="request_id")
    if batch.done < batch.total:
        return envelope(_progress(batch))
    return envelope(_answers(batch, await _all_items(store, batch)))


def _progress(batch: Batch) -> dict[str, Any]:
    return {
        "status": batch.status,
        "request_id": batch.id,
        "model": batch.model,
        "total": batch.total,
        "done": batch.done,
    }


async def _all_items(store: BatchStore, batch: Batch) -> list[BatchItem]:
    items: list[BatchItem] = []
    while len(items) < batch.total:
        page = await store.items(batch.id, after_position=items[-1].position if items else -1)
        if not page:
            break
        items.extend(page)
    return items


def _answers(batch: Batch, items: list[BatchItem]) -> dict[str, Any]:
    responses = [_response(item) for item in items]
    prompt = sum(int((item.usage or {}).get("prompt_tokens", 0)) for item in items)
    completion = sum(int((item.usage or {}).get("completion_tokens", 0)) for item in items)
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    return {
        "status": batch.status,
        "request_id": batch.id,
        "model": batch.model,
        "responses": responses,
        "usage": usage,
    }


def _response(item: BatchItem) -> dict[str, Any]:
    response: dict[str, Any] = {
        "id": item.position,
        "result": item.result,
        "success": item.state is ItemState.SUCCEEDED,
        "external_reference": item.external_reference,
    }
    if item.state is not ItemState.SUCCEEDED:
        response["error"] = item.error or {"code": 3000, "message": f"the request was {item.state.value}"}
    return response
