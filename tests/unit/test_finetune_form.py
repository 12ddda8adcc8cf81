"""The asset upload's form, read as it arrives: the same parts whatever sizes the body comes in (down to a byte at
a time), the file on disk and never past its limit, and a clear 400 for a body that is not a whole form. The
body limit lets the upload route take the larger bodies it allows, and no other route."""

import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from starlette.types import Message, Receive, Scope, Send

from cirrus.api.workers_ai.finetunes import ASSET_UPLOAD_PATH
from cirrus.errors import InvalidInput
from cirrus.finetunes.form import UploadForm, read_form
from cirrus.server.body_limit import BodyLimitMiddleware

# Bytes that look like the start of a delimiter, inside the file, must stay file bytes.
CONTENT = b"\x00\x01--\r\n--\r\n-" * 300 + bytes(range(256)) * 40


def encoded(content: bytes = CONTENT, **fields: str) -> tuple[bytes, str]:
    request = httpx.Request(
        "POST",
        "http://test/upload",
        data=fields or {"file_name": "adapter_model.safetensors"},
        files={"file": ("weights.bin", content, "application/octet-stream")},
    )
    return request.read(), request.headers["content-type"]


async def chunked(body: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


async def read(
    body: bytes, content_type: str, staged: Path, size: int = 65536, limit: int = 10**6
) -> UploadForm:
    return await read_form(chunked(body, size), content_type, staged, limit)


@pytest.mark.parametrize("size", [1, 7, 1000, 65536])
async def test_the_form_reads_the_same_in_chunks_of_any_size(tmp_path: Path, size: int) -> None:
    body, content_type = encoded()
    staged = tmp_path / "staged"
    form = await read(body, content_type, staged, size)
    assert form == UploadForm({"file_name": "adapter_model.safetensors"}, True, len(CONTENT), "weights.bin")
    assert staged.read_bytes() == CONTENT


async def test_a_file_over_the_limit_is_read_to_its_end_but_kept_only_to_the_limit(tmp_path: Path) -> None:
    body, content_type = encoded()
    staged = tmp_path / "staged"
    form = await read(body, content_type, staged, limit=1000)
    assert form.file_bytes == len(CONTENT) and form.fields == {"file_name": "adapter_model.safetensors"}
    assert staged.read_bytes() == CONTENT[:1000]


async def test_a_form_without_a_file_has_none(tmp_path: Path) -> None:
    request = httpx.Request("POST", "http://test/", files={"file_name": (None, "adapter_config.json")})
    form = await read(request.read(), request.headers["content-type"], tmp_path / "staged")
    assert form == UploadForm({"file_name": "adapter_config.json"}, False, 0, None)


async def test_only_the_file_name_field_is_kept_however_many_others_come(tmp_path: Path) -> None:
    others = {f"extra-{n}": "x" * 60_000 for n in range(20)}
    body, content_type = encoded(CONTENT, **others, file_name="adapter_config.json")
    form = await read(body, content_type, tmp_path / "staged")
    assert form == UploadForm({"file_name": "adapter_config.json"}, True, len(CONTENT), "weights.bin")


@pytest.mark.parametrize(
    ("cut", "content_type", "expected"),
    [
        (-10, None, "the form ends before its closing boundary: the upload was cut short"),
        (0, "application/json", "the body is not a multipart form"),
        (0, "multipart/form-data", "the body is not a multipart form"),
    ],
)
async def test_a_body_that_is_not_a_whole_form_is_refused(
    tmp_path: Path, cut: int, content_type: str | None, expected: str
) -> None:
    body, declared = encoded()
    with pytest.raises(InvalidInput, match=re.escape(expected)):
        await read(body[: len(body) + cut], content_type or declared, tmp_path / "staged")


async def test_a_part_without_a_disposition_is_refused(tmp_path: Path) -> None:
    body = b"--b\r\nContent-Type: text/plain\r\n\r\nhello\r\n--b--\r\n"
    with pytest.raises(
        InvalidInput, match=re.escape("has no 'Content-Disposition: form-data; name=...' header")
    ):
        await read(body, "multipart/form-data; boundary=b", tmp_path / "staged")


async def _status(path: str, body: bytes, declare_length: bool) -> int:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    messages: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[Message] = []

    async def receive() -> Message:
        return messages.pop(0)

    async def send(message: Message) -> None:
        sent.append(message)

    headers = [(b"content-length", str(len(body)).encode())] if declare_length else []
    scope = {"type": "http", "method": "POST", "path": path, "headers": headers}
    await BodyLimitMiddleware(app, 100, {ASSET_UPLOAD_PATH: 1000})(scope, receive, send)
    status: int = sent[0]["status"]
    return status


@pytest.mark.parametrize("declare_length", [True, False])
async def test_the_upload_route_has_its_own_body_limit(declare_length: bool) -> None:
    upload = "/client/v4/accounts/a/ai/finetunes/f/finetune-assets"
    assert await _status(upload, b"x" * 1000, declare_length) == 200
    assert await _status(upload, b"x" * 1001, declare_length) == 413
    assert await _status("/ai/run/m", b"x" * 100, declare_length) == 200
    assert await _status("/ai/run/m", b"x" * 101, declare_length) == 413
    assert await _status("/ai/finetunes/f/finetune-assets", b"x" * 1000, declare_length) == 200
    assert await _status(f"{upload}/more", b"x" * 101, declare_length) == 413
