"""Server-sent events, and noticing that a client went away while we compute a non-streamed answer."""

import asyncio
import json
from collections.abc import Awaitable
from typing import Any, TypeVar

from starlette.requests import Request

from cirrus.errors import RequestAborted

T = TypeVar("T")
DONE = b"data: [DONE]\n\n"


def sse_data(payload: dict[str, Any]) -> bytes:
    return (
        b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n\n"
    )


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Run work; if the client disconnects first, cancel it (which stops the generation)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise RequestAborted("the client disconnected")
    return task.result()
