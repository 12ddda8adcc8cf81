"""What both SDK clients share: the error they raise and how a Cirrus answer over HTTP becomes one."""

import json
from collections.abc import Generator
from typing import Any

import httpx

from cirrus.errors import CirrusError


class AiError(Exception):
    """A failed run: the Workers AI code and HTTP status, whichever way the platform was reached."""

    def __init__(self, message: str, code: int, status: int) -> None:
        super().__init__(f"{message} (code {code}, HTTP {status})")
        self.message, self.code, self.status = message, code, status

    @classmethod
    def from_cirrus(cls, error: CirrusError) -> "AiError":
        return cls(error.message, error.code, error.status)


def json_body(response: httpx.Response) -> dict[str, Any]:
    """The response's JSON object; for anything else (a proxy's HTML page, an empty body), an empty dict."""
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def remote_error(body: dict[str, Any], status: int) -> AiError:
    errors = body.get("errors") or [{"code": 0, "message": f"HTTP {status}"}]
    return AiError(str(errors[0].get("message")), int(errors[0].get("code", 0)), status)


def streamed_events(
    client: httpx.Client, path: str, body: dict[str, Any]
) -> Generator[dict[str, Any], None, None]:
    """POST `body` and yield each server-sent event's JSON until `[DONE]`; a refusal, before or during the
    stream, raises AiError. Closing the generator closes the connection, which cancels the generation."""
    with client.stream("POST", path, json=body) as response:
        if response.status_code != 200:
            response.read()
            raise remote_error(json_body(response), response.status_code)
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: ") :])
            if event.get("success") is False:
                raise remote_error(event, response.status_code)
            yield event
