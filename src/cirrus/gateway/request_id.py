"""Give every request an id, keep it in the ASGI scope, and return it as `cf-ai-req-id`."""

import re
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = b"cf-ai-req-id"
_ACCEPTABLE = re.compile(rb"^[A-Za-z0-9._-]{1,128}$")


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = self._incoming(scope) or uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (HEADER, request_id.encode())]
            await send(message)

        await self.app(scope, receive, send_with_id)

    @staticmethod
    def _incoming(scope: Scope) -> str | None:
        for name, value in scope.get("headers", []):
            if name == HEADER and _ACCEPTABLE.match(value):
                return str(value.decode())
        return None
