"""An instance's items (uploaded files) and ingest jobs: `POST .../instances/{id}/items` uploads one or more files
(multipart `file` parts; `wait_for_completion` waits until they are indexed), `GET .../items` and
`GET`/`DELETE .../items/{item_id}` (deleting an item removes its chunks), `GET .../jobs/{job_id}` the progress of
one upload's ingest. Files are indexed in the background, as low-priority work; an unchanged file uploaded again
is not indexed again."""

import asyncio
from typing import Any

from fastapi import APIRouter, Request

from cirrus.api.ai_search.instances import PREFIXES, Page, PerPage, instance_of, rag_store
from cirrus.api.ai_search.shapes import item_object, job_object
from cirrus.api.context import platform_of, principal_of
from cirrus.api.openai.multipart import FormPart, form_part_list
from cirrus.api.path_parameters import account_parameter
from cirrus.api.workers_ai.schemas import envelope, paged_envelope
from cirrus.errors import InvalidInput, NotFound
from cirrus.rag.model import Item, ItemState

router = APIRouter(tags=["AI Search"])
MAX_KEY_CHARS = 128  # Cloudflare's limit on an uploaded file's name
WAIT_POLL_S = 0.2
UPLOAD_BODY = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["file"],
                "properties": {
                    "file": {
                        "type": "string",
                        "format": "binary",
                        "description": "Markdown, text, HTML or PDF",
                    },
                    "wait_for_completion": {"type": "boolean"},
                },
            }
        }
    },
}


async def upload_items(instance_id: str, request: Request) -> Any:
    instance = await instance_of(request, instance_id)
    parts = form_part_list(await request.body(), request.headers.get("content-type", ""))
    limit = platform_of(request).settings.ai_search_max_file_bytes
    files = [_file(part, limit) for part in parts if part.name == "file"]
    if not files:
        raise InvalidInput("the form has no 'file' part: send each document as 'file'", param="file")
    token_id = principal_of(request).token_id  # its embedding calls are made as this token
    _, items = await rag_store(request).add_items(instance, files, token_id)
    _poke(request)
    if _wants_wait(parts):
        items = await _indexed(request, instance_id, items)
    objects = [item_object(item) for item in items]
    return envelope(objects[0] if len(objects) == 1 else objects)


def _file(part: FormPart, max_bytes: int) -> tuple[str, bytes]:
    key = (part.filename or "").strip()
    if not key or len(key) > MAX_KEY_CHARS:
        raise InvalidInput(f"each 'file' needs a file name of 1 to {MAX_KEY_CHARS} characters", param="file")
    if len(part.data) > max_bytes:
        raise InvalidInput(
            f"'{key}' is {len(part.data)} bytes; files may be at most {max_bytes}", param="file"
        )
    if not part.data:
        raise InvalidInput(f"'{key}' is empty: there is nothing to index", param="file")
    return key, part.data


def _wants_wait(parts: list[FormPart]) -> bool:
    return any(
        part.name == "wait_for_completion" and part.data.strip().lower() in (b"true", b"1") for part in parts
    )


async def _indexed(request: Request, instance_id: str, items: list[Item]) -> list[Item]:
    """The items once indexed (or failed), polled until the request's time limit."""
    deadline = asyncio.get_running_loop().time() + platform_of(request).settings.request_timeout_s
    while True:
        instance = await instance_of(request, instance_id)
        current = [await rag_store(request).item(instance, item.id) or item for item in items]
        if all(item.state in (ItemState.COMPLETED, ItemState.ERROR) for item in current):
            return current
        if asyncio.get_running_loop().time() > deadline:
            return current
        await asyncio.sleep(WAIT_POLL_S)


def _poke(request: Request) -> None:
    runner = getattr(request.app.state, "rag_runner", None)
    if runner is not None:
        runner.poke()


async def list_items(instance_id: str, request: Request, page: Page = 1, per_page: PerPage = 50) -> Any:
    instance = await instance_of(request, instance_id)
    items = await rag_store(request).items(instance)
    return paged_envelope([item_object(item) for item in items], page, per_page)


async def get_item(instance_id: str, item_id: str, request: Request) -> Any:
    instance = await instance_of(request, instance_id)
    item = await rag_store(request).item(instance, item_id)
    if item is None:
        raise NotFound(f"no item '{item_id}' in AI Search instance '{instance_id}'", param="item_id")
    return envelope(item_object(item))


async def delete_item(instance_id: str, item_id: str, request: Request) -> Any:
    instance = await instance_of(request, instance_id)
    item = await rag_store(request).item(instance, item_id)
    if item is None or not await rag_store(request).delete_item(instance, item_id):
        raise NotFound(f"no item '{item_id}' in AI Search instance '{instance_id}'", param="item_id")
    return envelope(item_object(item))


async def get_job(instance_id: str, job_id: str, request: Request) -> Any:
    instance = await instance_of(request, instance_id)
    job = await rag_store(request).job(instance, job_id)
    if job is None:
        raise NotFound(f"no job '{job_id}' in AI Search instance '{instance_id}'", param="job_id")
    return envelope(job_object(job))


for _prefix in PREFIXES:
    _extra = account_parameter(_prefix)
    _items = f"{_prefix}/instances/{{instance_id}}/items"
    router.add_api_route(
        _items,
        upload_items,
        methods=["POST"],
        summary="Upload files to an AI Search instance",
        openapi_extra={**_extra, "requestBody": UPLOAD_BODY},
    )
    router.add_api_route(
        _items, list_items, methods=["GET"], summary="List an instance's items", openapi_extra=_extra
    )
    router.add_api_route(
        f"{_items}/{{item_id}}", get_item, methods=["GET"], summary="Read an item", openapi_extra=_extra
    )
    router.add_api_route(
        f"{_items}/{{item_id}}",
        delete_item,
        methods=["DELETE"],
        summary="Delete an item and its chunks",
        openapi_extra=_extra,
    )
    router.add_api_route(
        f"{_prefix}/instances/{{instance_id}}/jobs/{{job_id}}",
        get_job,
        methods=["GET"],
        summary="An ingest job's progress",
        openapi_extra=_extra,
    )
