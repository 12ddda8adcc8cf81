"""One log line and one set of metrics per request, written when the response has ended (streams included),
and the headers from what the pipeline decided for the call (cache status, fallback step, node, rate limits)
added to the response (call_headers.py)."""

import logging
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cirrus.gateway.call import Call
from cirrus.metering.record import UsageRecord
from cirrus.observability.logs import log_request
from cirrus.observability.metrics import Metrics
from cirrus.server.call_headers import call_headers

log = logging.getLogger("cirrus.requests")


class AccessLogMiddleware:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        started = time.perf_counter()
        status = 500

        async def send_with_headers(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                call = state.get("call")
                if isinstance(call, Call):
                    message["headers"] = _merged(message.get("headers", []), call_headers(call))
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        finally:
            self._finish(scope, state, status, time.perf_counter() - started)

    def _finish(self, scope: Scope, state: dict[str, Any], status: int, duration_s: float) -> None:
        call = state.get("call")
        if isinstance(call, Call) and (call.record is not None or call.billed_later):
            # An answer that ended early is metered once its worker confirmed what it processed, which can be
            # after the response ended: its line is written then.
            call.when_recorded(lambda record: self._observe(call, record))
            return
        log.info(
            "request",
            extra={
                "method": scope["method"],
                "path": scope["path"],
                "status": status,
                "duration_s": duration_s,
            },
        )

    def _observe(self, call: Call, record: UsageRecord) -> None:
        self.metrics.observe_request(record, call.ttft_s)
        log_request(record, prompt=call.logged_prompt(), answer=call.logged_answer())


def _merged(headers: list[tuple[bytes, bytes]], extra: dict[str, str]) -> list[tuple[bytes, bytes]]:
    present = {name.lower() for name, _ in headers}
    added = [
        (k.encode("latin-1"), v.encode("latin-1")) for k, v in extra.items() if k.encode() not in present
    ]
    return [*headers, *added]
