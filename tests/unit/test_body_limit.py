"""A chunked body (no Content-Length) to a route with a limit of its own reaches the route as it arrives, never
gathered whole in front of it; past that limit the route's reading stops and the caller gets the same 413 as a
declared length over it, whatever the route would have answered instead. (test_finetune_form.py covers which
limit each route has.)"""

import json
import logging
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cirrus.api.workers_ai.finetunes import ASSET_UPLOAD_PATH
from cirrus.server.body_limit import BodyLimitMiddleware
from cirrus.server.handlers import install_handlers

UPLOAD = "/ai/finetunes/f/finetune-assets"
CHUNK, ROUTE_LIMIT = 100, 1000


class Client:
    """Sends a body in chunks, counting how many the server has taken, and keeps what comes back."""

    def __init__(self, chunks: int) -> None:
        self.left = chunks
        self.taken = 0
        self.sent: list[Message] = []

    async def receive(self) -> Message:
        if self.left == 0:
            return {"type": "http.disconnect"}
        self.left -= 1
        self.taken += 1
        return {"type": "http.request", "body": b"x" * CHUNK, "more_body": self.left > 0}

    async def send(self, message: Message) -> None:
        self.sent.append(message)

    @property
    def status(self) -> int:
        starts = [m for m in self.sent if m["type"] == "http.response.start"]
        assert len(starts) == 1, self.sent
        status: int = starts[0]["status"]
        return status

    @property
    def body(self) -> Any:
        return json.loads(
            b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")
        )


async def call(app: ASGIApp, client: Client, declared: int | None = None) -> None:
    headers = [] if declared is None else [(b"content-length", str(declared).encode())]
    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "server": ("test", 80),
        "path": UPLOAD,
        "raw_path": UPLOAD.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": headers,
    }
    await BodyLimitMiddleware(app, 100, {ASSET_UPLOAD_PATH: ROUTE_LIMIT})(scope, client.receive, client.send)


def streaming_route(answer_errors: bool) -> FastAPI:
    """The upload route's way of reading: the body as a stream, chunk by chunk. With `answer_errors`, whatever
    goes wrong while it reads is answered 400 by the route itself (as FastAPI does while it parses a body)."""
    app = FastAPI()
    install_handlers(app)

    async def upload(request: Request) -> JSONResponse:
        size = 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
        except Exception as error:
            if not answer_errors:
                raise
            return JSONResponse({"read": "failed", "why": str(error)}, status_code=400)
        return JSONResponse({"read": size})

    app.add_api_route(UPLOAD, upload, methods=["POST"])
    return app


async def test_a_chunked_body_reaches_the_route_as_it_arrives() -> None:
    client = Client(chunks=10)
    taken_when_the_route_began: list[int] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        first = await receive()
        taken_when_the_route_began.append(client.taken)
        more = first.get("more_body", False)
        while more:
            more = (await receive()).get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    await call(app, client)
    assert taken_when_the_route_began == [1]
    assert client.status == 200 and client.taken == 10


async def test_a_chunked_body_within_the_routes_limit_is_read_whole() -> None:
    client = Client(chunks=ROUTE_LIMIT // CHUNK)
    await call(streaming_route(answer_errors=False), client)
    assert (client.status, client.body) == (200, {"read": ROUTE_LIMIT})


@pytest.mark.parametrize("answer_errors", [False, True])
async def test_a_chunked_body_past_the_routes_limit_is_refused_at_the_limit(
    answer_errors: bool, caplog: pytest.LogCaptureFixture
) -> None:
    declared = Client(chunks=0)
    await call(streaming_route(answer_errors), declared, declared=ROUTE_LIMIT + 1)
    assert declared.status == 413
    assert "over the limit of 1000 bytes" in declared.body["errors"][0]["message"]

    client = Client(chunks=50)
    await call(streaming_route(answer_errors), client)
    assert (client.status, client.body) == (413, declared.body)
    assert client.taken == ROUTE_LIMIT // CHUNK + 1  # read no further than the chunk that passed the limit
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]
