"""Refuse request bodies over the limit with 413 (Workers AI code 3006) before they are read whole.

A declared Content-Length over the limit is refused before a byte is read (the server holds the body to it).
A body without one (chunked) is read here, at most the limit plus one chunk, and refused as soon as it passes
the limit; otherwise the app receives it whole. Raising from inside the app's receive() alone would not do:
FastAPI turns any exception while it reads the body into its own 400 "error parsing the body".

Routes that take larger bodies (a fine-tune's adapter upload) have their own limit, by path. Their chunked bodies
are not gathered here (that would hold up to the route's limit in memory for any caller): the route reads them as
they arrive, counted. At the chunk that passes the limit the 413 is sent from here, the route's receive() raises
so that it stops reading, and whatever the route answers after that is dropped.
"""

import re
from collections.abc import Awaitable, Callable, Mapping

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cirrus.api.errors import error_response
from cirrus.api.protocol import protocol_for
from cirrus.errors import RequestTooLarge


class BodyLimitMiddleware:
    def __init__(
        self, app: ASGIApp, max_bytes: int, by_path: Mapping[re.Pattern[str], int] | None = None
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.by_path = dict(by_path or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        own_limit = self._own_limit(scope["path"])
        limit = self.max_bytes if own_limit is None else own_limit
        declared = self._declared_length(scope)
        if declared is not None:
            if declared > limit:
                await self._refuse(scope, receive, send, limit)
            else:
                await self.app(scope, receive, send)
            return
        if own_limit is not None:
            await self._counted(scope, receive, send, own_limit)
            return
        body = await self._read_within_limit(receive, limit)
        if body is None:
            await self._refuse(scope, receive, send, limit)
            return
        await self.app(scope, self._replay(body, receive), send)

    def _own_limit(self, path: str) -> int | None:
        return next((limit for pattern, limit in self.by_path.items() if pattern.fullmatch(path)), None)

    @staticmethod
    def _declared_length(scope: Scope) -> int | None:
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit():
                return int(value)
        return None

    async def _counted(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        counted = _CountedBody(receive, send, limit, lambda: self._refuse(scope, receive, send, limit))
        try:
            await self.app(scope, counted.receive, counted.send)
        except RequestTooLarge:
            if not counted.refused:
                raise

    async def _read_within_limit(self, receive: Receive, limit: int) -> Message | None:
        """The whole body as one http.request message, or None once it passes the limit."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: let the app see it
                return message
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

    @staticmethod
    def _replay(first: Message, receive: Receive) -> Receive:
        pending: list[Message] = [first]

        async def replay_receive() -> Message:
            return pending.pop() if pending else await receive()

        return replay_receive

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        await error_response(_too_large(limit), protocol_for(scope["path"]))(scope, receive, send)


class _CountedBody:
    """The app's receive and send for a body it reads as it arrives. Once the body passes `limit`, `refuse` answers
    413 (unless the app had begun its answer), `receive` raises RequestTooLarge, and the app's own answer is
    dropped."""

    def __init__(
        self, receive: Receive, send: Send, limit: int, refuse: Callable[[], Awaitable[None]]
    ) -> None:
        self._receive = receive
        self._send = send
        self._limit = limit
        self._refuse = refuse
        self._size = 0
        self._answering = False
        self.refused = False

    async def receive(self) -> Message:
        if self._size > self._limit:
            raise _too_large(self._limit)
        message = await self._receive()
        if message["type"] == "http.request":
            self._size += len(message.get("body", b""))
            if self._size > self._limit:
                if not self._answering:
                    await self._refuse()
                    self.refused = True
                raise _too_large(self._limit)
        return message

    async def send(self, message: Message) -> None:
        if self.refused:
            return
        if message["type"] == "http.response.start":
            self._answering = True
        await self._send(message)


def _too_large(limit: int) -> RequestTooLarge:
    return RequestTooLarge(f"Request is too large: the body is over the limit of {limit} bytes")
