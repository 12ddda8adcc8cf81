"""The gateway's `Call` for a request: made once per request from what the middleware left in its scope (request
id, principal, arrival time) and kept there for the access log."""

import asyncio
from collections.abc import Mapping

from starlette.requests import Request

from cirrus.api.context import principal_of, request_id_of
from cirrus.api.protocol import protocol_for
from cirrus.gateway.call import Call

COLLECT_LOG_HEADER = "cf-aig-collect-log"


def call_of(
    request: Request, *, stream: bool, log_prompts: bool = False, timeout_s: float | None = None
) -> Call:
    """The call for this request, made once and kept in the scope for the access log; `timeout_s` is the
    request time limit, counted from the request's arrival."""
    state = request.scope.setdefault("state", {})
    existing = state.get("call")
    if isinstance(existing, Call):
        existing.stream = stream
        return existing
    principal = principal_of(request)
    call = Call(
        request_id=request_id_of(request),
        principal=principal,
        route=protocol_for(request.url.path).value,
        headers=request.headers,
        stream=stream,
        collect_log=log_prompts or principal.collect_log or _header_true(request.headers, COLLECT_LOG_HEADER),
        deadline=_deadline(state.get("arrived_at"), timeout_s),
    )
    state["call"] = call
    return call


def _deadline(arrived_at: object, timeout_s: float | None) -> float | None:
    if timeout_s is None:
        return None
    start = arrived_at if isinstance(arrived_at, float) else asyncio.get_running_loop().time()
    return start + timeout_s


def _header_true(headers: Mapping[str, str], name: str) -> bool:
    return headers.get(name, "").strip().lower() in ("1", "true", "yes")
