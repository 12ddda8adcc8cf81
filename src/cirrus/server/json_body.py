"""Read every request body as JSON, whatever Content-Type says, except a file upload.

Workers AI does, and its documented curl examples rely on it: `curl -d '{...}'` labels the body
application/x-www-form-urlencoded. Every Cirrus route that takes a body takes JSON but `POST /v1/files`, whose
multipart/form-data label carries the parts' boundary and is left as it is; a body that is not JSON still gets
a clear 400 from validation.
"""

from starlette.types import ASGIApp, Receive, Scope, Send

JSON = b"application/json"
MULTIPART = b"multipart/form-data"


class JsonBodyMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in ("POST", "PUT", "PATCH") and not _multipart(scope):
            headers = [(name, value) for name, value in scope["headers"] if name != b"content-type"]
            scope = {**scope, "headers": [*headers, (b"content-type", JSON)]}
        await self.app(scope, receive, send)


def _multipart(scope: Scope) -> bool:
    return any(
        name == b"content-type" and value.lower().startswith(MULTIPART) for name, value in scope["headers"]
    )
