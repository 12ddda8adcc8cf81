"""Reading a multipart/form-data body (the Files API's upload) without a form library.

The JSON body middleware relabels every POST body as JSON (server/json_body.py), so the boundary that the
Content-Type header carried may be gone by the time the route reads the body. A form body begins with its first
delimiter line, `--<boundary>`, so the boundary is read from there when the header no longer names it.
"""

from dataclasses import dataclass
from email.message import Message

from cirrus.errors import InvalidInput

CRLF = b"\r\n"
MAX_BOUNDARY = 70  # RFC 2046


@dataclass(frozen=True)
class FormPart:
    name: str
    filename: str | None
    data: bytes


def form_parts(body: bytes, content_type: str) -> dict[str, FormPart]:
    """The form's parts by name (a name sent twice: the last part)."""
    return {part.name: part for part in form_part_list(body, content_type)}


def form_part_list(body: bytes, content_type: str) -> list[FormPart]:
    """Every part of the form, in order (a name may repeat: several files)."""
    delimiter = b"--" + _boundary(body, content_type)
    sections = (CRLF + body).split(CRLF + delimiter)
    parts: list[FormPart] = []
    for section in sections[1:]:
        if section.startswith(b"--"):  # the closing delimiter
            return parts
        parts.append(_part(section))
    raise InvalidInput("the form ends without its closing boundary: the upload was cut short")


def _boundary(body: bytes, content_type: str) -> bytes:
    declared = _header_parameter("content-type", content_type, "boundary")
    if content_type.lower().startswith("multipart/") and declared:
        return declared.encode("latin-1")
    first_line = body.split(CRLF, 1)[0].rstrip(b" \t")
    if not first_line.startswith(b"--") or not 0 < len(first_line) - 2 <= MAX_BOUNDARY:
        raise InvalidInput("the body must be a multipart/form-data form with a 'file' field")
    return first_line[2:]


def _part(section: bytes) -> FormPart:
    padding, line_end, rest = section.partition(CRLF)
    head, blank, data = rest.partition(CRLF + CRLF)
    if padding.strip(b" \t") or not line_end or not blank:
        raise InvalidInput("a part of the form is malformed: its headers do not end in a blank line")
    disposition = _headers(head).get("content-disposition", "")
    name = _header_parameter("content-disposition", disposition, "name")
    if not disposition.lower().startswith("form-data") or not name:
        raise InvalidInput("a part of the form has no 'Content-Disposition: form-data; name=...' header")
    return FormPart(name, _filename(disposition), data)


def _headers(head: bytes) -> dict[str, str]:
    headers: dict[str, str] = {}
    for line in head.split(CRLF):
        name, colon, value = line.decode("utf-8", errors="replace").partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    return headers


def _header_parameter(header: str, value: str, parameter: str) -> str | None:
    message = Message()
    message[header] = value
    found = message.get_param(parameter, header=header)
    return found if isinstance(found, str) else None


def _filename(disposition: str) -> str | None:
    message = Message()
    message["content-disposition"] = disposition
    return message.get_filename()
