"""One API call as the gateway sees it: who makes it, in which protocol, what it asked of the gateway in
headers, and what the gateway learned (the usage record, the time to first token, headers to answer with)."""

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from cirrus.api.context import principal_of, request_id_of
from cirrus.api.protocol import WireProtocol, protocol_for
from cirrus.auth import Principal
from cirrus.metering.record import UsageRecord

COLLECT_LOG_HEADER = "cf-aig-collect-log"


@dataclass
class Call:
    request_id: str
    principal: Principal
    protocol: WireProtocol
    headers: Mapping[str, str]
    response_headers: dict[str, str] = field(default_factory=dict)
    stream: bool = False
    collect_log: bool = False
    started_at: float = field(default_factory=time.time)
    started_clock: float = field(default_factory=time.perf_counter)
    record: UsageRecord | None = None
    ttft_s: float | None = None
    prompt: Any = None
    answer: str | None = None

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started_clock

    def mark_first_token(self) -> None:
        if self.ttft_s is None:
            self.ttft_s = self.elapsed_s()

    def logged_prompt(self) -> Any:
        return self.prompt if self.collect_log else None

    def logged_answer(self) -> str | None:
        return self.answer if self.collect_log else None


def call_of(request: Request, *, stream: bool, log_prompts: bool = False) -> Call:
    """The call for this request, made once and kept in the scope for the access log."""
    state = request.scope.setdefault("state", {})
    existing = state.get("call")
    if isinstance(existing, Call):
        existing.stream = stream
        return existing
    principal = principal_of(request)
    call = Call(
        request_id=request_id_of(request),
        principal=principal,
        protocol=protocol_for(request.url.path),
        headers=request.headers,
        response_headers=state.setdefault("response_headers", {}),
        stream=stream,
        collect_log=log_prompts or principal.collect_log or _header_true(request.headers, COLLECT_LOG_HEADER),
    )
    state["call"] = call
    return call


def _header_true(headers: Mapping[str, str], name: str) -> bool:
    return headers.get(name, "").strip().lower() in ("1", "true", "yes")
