"""Read every request body as JSON, whatever Content-Type says.

Workers AI does, and its documented curl examples rely on it: `curl -d '{...}'` labels the body
application/x-www-form-urlencoded. Every Cirrus route that takes a body takes JSON, so the label carries no
information; a body that is not JSON still gets a clear 400 from validation.
"""

from starlette.types import ASGIApp, Receive, Scope, Send

JSON = b"application/json"


class JsonBodyMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in ("POST", "PUT", "PATCH"):
            headers = [(name, value) for name, value in scope["headers"] if name != b"content-type"]
            scope = {**scope, "headers": [*headers, (b"content-type", JSON)]}
        await self.app(scope, receive, send)
