"""Give every request an id: the caller's `x-request-id` (or `cf-ai-req-id`) when it is sane, else a new one.
It is kept in the ASGI scope and in a context variable (so every log line carries it), passed to the worker,
and returned as `cf-ai-req-id` and `x-request-id`.

As the outermost middleware it also notes when the request arrived (on the event loop's clock, `arrived_at` in
the scope's state): the request's time limit runs from there, so it covers the gateway's own steps too."""

import asyncio
import re
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cirrus.observability.logs import current_request_id

HEADER = b"cf-ai-req-id"
INCOMING = (b"x-request-id", HEADER)
_ACCEPTABLE = re.compile(rb"^[A-Za-z0-9._:-]{1,128}$")


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        arrived_at = asyncio.get_running_loop().time()
        request_id = self._incoming(scope) or uuid.uuid4().hex
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        state["arrived_at"] = arrived_at
        encoded = request_id.encode()

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [
                    *message.get("headers", []),
                    (HEADER, encoded),
                    (b"x-request-id", encoded),
                ]
            await send(message)

        token = current_request_id.set(request_id)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            current_request_id.reset(token)

    @staticmethod
    def _incoming(scope: Scope) -> str | None:
        headers = dict(scope.get("headers", []))
        for name in INCOMING:
            value = headers.get(name)
            if value is not None and _ACCEPTABLE.match(value):
                return str(value.decode())
        return None
