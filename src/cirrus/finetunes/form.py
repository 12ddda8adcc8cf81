"""The asset upload's multipart/form-data body, read as it arrives: its `file` part is written to disk as it
comes, never held whole in memory (an adapter may be 300 MB); of its other parts only `file_name`, a short text
field, is kept: any others are read through and dropped, so that no number of them adds up in memory.

A file part over `max_file_bytes` is read to its end but not kept past the limit, so the client, which sends
the whole body before it reads the answer, gets the clear refusal rather than a reset connection (the body
limit in front of the route bounds how much that is).
"""

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from email.message import Message
from pathlib import Path

from cirrus.errors import InvalidInput

CRLF = b"\r\n"
FILE_FIELD = "file"
NAME_FIELD = "file_name"
MAX_BOUNDARY = 70  # RFC 2046
MAX_HEAD_BYTES = 16 * 1024
MAX_FIELD_BYTES = 64 * 1024
FORM_RULE = "send a multipart/form-data form with the fields 'file_name' and 'file'"


@dataclass(frozen=True)
class UploadForm:
    """`fields` holds `file_name` if it came; `file_bytes` is the file part's whole size, even where only the first
    `max_file_bytes` were kept."""

    fields: dict[str, str]
    has_file: bool
    file_bytes: int
    filename: str | None


async def read_form(
    chunks: AsyncIterator[bytes], content_type: str, staged: Path, max_file_bytes: int
) -> UploadForm:
    """Reads the form from `chunks`, writing its `file` part to `staged`."""
    delimiter = CRLF + b"--" + _boundary(content_type)
    body = _Body(chunks, first=CRLF)  # the leading CRLF lets the first delimiter match like the others
    await body.copy_until(delimiter, lambda _: None, MAX_HEAD_BYTES)  # the preamble
    fields: dict[str, str] = {}
    has_file, file_bytes, filename = False, 0, None
    while not await body.at_closing_delimiter():
        await body.take_until(CRLF, MAX_BOUNDARY)  # transport padding after the delimiter
        name, part_filename = _disposition(await body.take_until(CRLF + CRLF, MAX_HEAD_BYTES))
        if name == FILE_FIELD:
            with staged.open("wb") as out:
                kept = _Capped(out.write, max_file_bytes)
                file_bytes = await body.copy_until(delimiter, kept, None)
            has_file, filename = True, part_filename
        elif name == NAME_FIELD:
            value = bytearray()
            await body.copy_until(delimiter, value.extend, MAX_FIELD_BYTES)
            fields[name] = value.decode("utf-8", errors="replace").strip()
        else:
            await body.copy_until(delimiter, lambda _: None, None)
    return UploadForm(fields, has_file, file_bytes, filename)


class _Capped:
    def __init__(self, write: Callable[[bytes], object], limit: int) -> None:
        self._write = write
        self._room = limit

    def __call__(self, data: bytes) -> None:
        if self._room > 0:
            self._write(data[: self._room])
        self._room -= len(data)


class _Body:
    """The body's chunks behind a small buffer, searched for the delimiters between parts."""

    def __init__(self, chunks: AsyncIterator[bytes], first: bytes) -> None:
        self._chunks = chunks
        self._buffer = bytearray(first)

    async def at_closing_delimiter(self) -> bool:
        while len(self._buffer) < 2:
            await self._fill()
        return self._buffer[:2] == b"--"

    async def take_until(self, marker: bytes, limit: int) -> bytes:
        taken = bytearray()
        await self.copy_until(marker, taken.extend, limit)
        return bytes(taken)

    async def copy_until(self, marker: bytes, sink: Callable[[bytes], object], limit: int | None) -> int:
        """Passes the bytes before `marker` to `sink` and drops the marker; returns how many were passed."""
        copied = 0
        while (found := self._buffer.find(marker)) < 0:
            safe = len(self._buffer) - len(marker) + 1  # a marker may begin in the bytes kept back
            if safe > 0:
                copied += self._drain(safe, sink)
            if limit is not None and copied > limit:
                raise InvalidInput(f"a part of the form is malformed or too long: {FORM_RULE}")
            await self._fill()
        copied += self._drain(found, sink)
        del self._buffer[: len(marker)]
        return copied

    def _drain(self, size: int, sink: Callable[[bytes], object]) -> int:
        sink(bytes(self._buffer[:size]))
        del self._buffer[:size]
        return size

    async def _fill(self) -> None:
        chunk = await anext(self._chunks, None)
        if chunk is None:
            raise InvalidInput("the form ends before its closing boundary: the upload was cut short")
        self._buffer += chunk


def _boundary(content_type: str) -> bytes:
    boundary = _parameter("content-type", content_type, "boundary")
    if not content_type.lower().startswith("multipart/form-data") or not boundary:
        raise InvalidInput(f"the body is not a multipart form: {FORM_RULE}")
    if len(boundary) > MAX_BOUNDARY:
        raise InvalidInput(f"the form's boundary is longer than {MAX_BOUNDARY} characters")
    return boundary.encode("latin-1")


def _disposition(head: bytes) -> tuple[str, str | None]:
    for line in head.decode("utf-8", errors="replace").split("\r\n"):
        header, colon, value = line.partition(":")
        if colon and header.strip().lower() == "content-disposition":
            name = _parameter("content-disposition", value.strip(), "name")
            if name:
                message = Message()
                message["content-disposition"] = value.strip()
                return name, message.get_filename()
    raise InvalidInput("a part of the form has no 'Content-Disposition: form-data; name=...' header")


def _parameter(header: str, value: str, parameter: str) -> str | None:
    message = Message()
    message[header] = value
    found = message.get_param(parameter, header=header)
    return found if isinstance(found, str) else None
