"""OpenAI's Files API, for batches: `POST /v1/files` (a multipart upload with `purpose` "batch", a JSONL file),
`GET /v1/files` (the account's files), `GET /v1/files/{id}`, `GET /v1/files/{id}/content` and `DELETE
/v1/files/{id}`. Batches' output and error files are listed and read like uploads (their content is made from
the batch's items when read: batch_output.py). Files belong to the account of the token that uploaded them:
another account's id is not found."""

from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from cirrus.api.context import platform_of, run_account
from cirrus.api.openai.batch_output import made_files, settle_account, settled_files
from cirrus.api.openai.batch_shapes import BATCH_PURPOSE, SHAPE, batch_of_file, file_object, page_object
from cirrus.api.openai.multipart import FormPart, form_parts
from cirrus.api.path_parameters import add_openai_route
from cirrus.errors import InvalidInput, NotFound
from cirrus.files import StoredFile
from cirrus.platform import Platform

router = APIRouter(tags=["OpenAI"])
MIN_EXPIRY_S, MAX_EXPIRY_S = 3600, 30 * 86_400  # OpenAI's bounds on `expires_after[seconds]`
UPLOAD_BODY = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["file", "purpose"],
                "properties": {
                    "file": {
                        "type": "string",
                        "format": "binary",
                        "description": "JSONL, one request a line",
                    },
                    "purpose": {"type": "string", "enum": [BATCH_PURPOSE]},
                },
            }
        }
    },
}


async def upload_file(request: Request) -> Any:
    account = run_account(request)
    platform = platform_of(request)
    parts = form_parts(await request.body(), request.headers.get("content-type", ""))
    purpose = _text(parts, "purpose")
    if purpose != BATCH_PURPOSE:
        raise InvalidInput(
            f"'purpose' must be \"{BATCH_PURPOSE}\", not {purpose!r}: files here feed batches",
            param="purpose",
        )
    upload = parts.get("file")
    if upload is None:
        raise InvalidInput("the form has no 'file' part: send the JSONL file as 'file'", param="file")
    content = _utf8(upload.data)
    if not content.strip():
        raise InvalidInput("'file' is empty: send one request a line", param="file")
    stored = await platform.gateway.files.upload(
        account, purpose, upload.filename or "upload.jsonl", content, _retention_s(parts, platform)
    )
    return file_object(stored)


def _text(parts: dict[str, FormPart], name: str) -> str:
    part = parts.get(name)
    if part is None:
        raise InvalidInput(f"the form has no '{name}' field", param=name)
    return _utf8(part.data, name).strip()


def _utf8(data: bytes, name: str = "file") -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidInput(
            f"'{name}' is not UTF-8 text: {error.reason} at byte {error.start}", param=name
        ) from None


def _retention_s(parts: dict[str, FormPart], platform: Platform) -> float:
    """`expires_after[seconds]` from the upload's creation, else the batch retention (OpenAI's 30 days)."""
    if "expires_after[seconds]" not in parts:
        return platform.settings.batch_retention_days * 86_400.0
    anchor = _text(parts, "expires_after[anchor]") if "expires_after[anchor]" in parts else "created_at"
    if anchor != "created_at":
        raise InvalidInput("'expires_after[anchor]' must be \"created_at\"", param="expires_after[anchor]")
    seconds = _text(parts, "expires_after[seconds]")
    if not seconds.isdigit() or not MIN_EXPIRY_S <= int(seconds) <= MAX_EXPIRY_S:
        raise InvalidInput(
            f"'expires_after[seconds]' must be a whole number from {MIN_EXPIRY_S} to {MAX_EXPIRY_S}",
            param="expires_after[seconds]",
        )
    return float(seconds)


async def list_files(
    request: Request,
    limit: int = Query(default=10_000, ge=1, le=10_000),
    order: Literal["asc", "desc"] = "desc",
    after: str | None = None,
    purpose: str | None = None,
) -> Any:
    account = run_account(request)
    gateway = platform_of(request).gateway
    await settle_account(gateway.files, gateway.batches, account)
    found = await gateway.files.list(account, limit + 1, order, after, purpose)
    return page_object([file_object(stored) for stored in found[:limit]], len(found) > limit)


async def visible_file(platform: Platform, account: str, file_id: str) -> StoredFile:
    """The account's file; a batch's output or error file is settled first if its batch finished unread."""
    files, batches = platform.gateway.files, platform.gateway.batches
    stored = await files.get(account, file_id)
    batch_id = batch_of_file(file_id)
    if stored is None and batch_id is not None:
        batch = await batches.get(account, batch_id)
        if batch is not None and batch.shape == SHAPE:
            await settled_files(files, batches, batch)
            stored = await files.get(account, file_id)
    if stored is None:
        raise NotFound(f"No such File object: {file_id}", param="file_id")
    return stored


async def file_content(platform: Platform, account: str, stored: StoredFile) -> str:
    files, batches = platform.gateway.files, platform.gateway.batches
    if stored.source is None:
        text = await files.content(stored)
    else:
        batch = await batches.get(account, stored.source)
        text = None if batch is None else (await made_files(batches, batch)).text(stored.id)
    if text is None:
        raise NotFound(f"No such File object: {stored.id}", param="file_id")
    return text


async def retrieve_file(file_id: str, request: Request) -> Any:
    return file_object(await visible_file(platform_of(request), run_account(request), file_id))


async def retrieve_content(file_id: str, request: Request) -> Any:
    platform, account = platform_of(request), run_account(request)
    text = await file_content(platform, account, await visible_file(platform, account, file_id))
    return Response(text.encode(), media_type="application/octet-stream")


async def delete_file(file_id: str, request: Request) -> Any:
    platform, account = platform_of(request), run_account(request)
    await visible_file(platform, account, file_id)
    if not await platform.gateway.files.delete(account, file_id):
        raise NotFound(f"No such File object: {file_id}", param="file_id")
    return {"id": file_id, "object": "file", "deleted": True}


add_openai_route(
    router,
    "/files",
    upload_file,
    "POST",
    "Upload a file (OpenAI Files, purpose batch)",
    {"requestBody": UPLOAD_BODY},
)
add_openai_route(router, "/files", list_files, "GET", "List files")
add_openai_route(router, "/files/{file_id}", retrieve_file, "GET", "Get a file")
add_openai_route(router, "/files/{file_id}/content", retrieve_content, "GET", "Get a file's content")
add_openai_route(router, "/files/{file_id}", delete_file, "DELETE", "Delete a file")
