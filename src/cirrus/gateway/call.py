"""One API call as the gateway sees it: who makes it, through which route, what it asked of the gateway in
headers, and what the gateway learned (the usage record, the time to first token, the cache status, the fallback
step, the node that answered, the rate-limit status). The server turns what was learned into response headers
(server/call_headers.py): the pipeline names no header it answers with.

It also carries the request's deadline, on the event loop's clock: set from its arrival (server/request_id.py)
plus the node's request time limit, so one limit covers the gateway's steps, the queue and generation."""

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from cirrus.auth import Principal
from cirrus.errors import RequestTimeout
from cirrus.metering.record import CacheStatus, UsageRecord
from cirrus.metering.reservations import Reservation
from cirrus.ratelimit.status import RateStatus

log = logging.getLogger(__name__)


@dataclass
class Call:
    request_id: str
    principal: Principal
    route: str  # the wire protocol it came in ("workers-ai", "openai", "anthropic"), recorded with its usage
    headers: Mapping[str, str]
    stream: bool = False
    collect_log: bool = False
    started_at: float = field(default_factory=time.time)
    started_clock: float = field(default_factory=time.perf_counter)
    record: UsageRecord | None = None
    ttft_s: float | None = None
    prompt: Any = None
    answer: str | None = None
    deadline: float | None = None  # None: no limit set at arrival (the service starts its own)
    reservation: Reservation | None = None  # what the budget holds for this call until it is metered
    cache_status: CacheStatus | None = None  # None: the call never reached the response cache
    step: int | None = None  # index in the fallback chain of the model that answered
    node_id: str | None = None  # on a cluster: the node that answered
    rate_status: RateStatus | None = None  # the rate limits as they stood when the call was admitted
    # An answer that ended early is metered once its generation closed, which can be after the response ended:
    # whoever needs the record (the access log) waits for it with `when_recorded`.
    billed_later: bool = False
    # The work was stopped by the platform, not the caller (a batch item preempted for an interactive request):
    # its tokens are recorded, at no cost and outside the caller's limits; the item runs again and pays then.
    waived: bool = False
    _on_record: list[Callable[[UsageRecord], None]] = field(default_factory=list)

    def set_record(self, record: UsageRecord) -> None:
        self.record = record
        callbacks, self._on_record = self._on_record, []
        for callback in callbacks:
            try:
                callback(record)
            except Exception:
                log.exception("a callback on the usage record of %s failed", self.request_id)

    def when_recorded(self, callback: Callable[[UsageRecord], None]) -> None:
        """Run `callback` with the call's usage record: now if it is written, else once it is."""
        if self.record is not None:
            callback(self.record)
        else:
            self._on_record.append(callback)

    def release_reservation(self) -> None:
        """Idempotent: every path that ends the call may call it."""
        if self.reservation is not None:
            self.reservation.release()

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started_clock

    def mark_first_token(self) -> None:
        if self.ttft_s is None:
            self.ttft_s = self.elapsed_s()

    def remaining_s(self) -> float | None:
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - asyncio.get_running_loop().time())

    def check_deadline(self, step: str) -> None:
        if self.deadline is not None and asyncio.get_running_loop().time() >= self.deadline:
            raise _timed_out(step)

    @asynccontextmanager
    async def within_deadline(self, step: str) -> AsyncIterator[None]:
        """Run a gateway step under what is left of the request's time limit; past it, RequestTimeout."""
        if self.deadline is None:
            yield
            return
        self.check_deadline(step)
        try:
            async with asyncio.timeout_at(self.deadline) as scope:
                yield
        except TimeoutError:
            if scope.expired():
                raise _timed_out(step) from None
            raise

    def logged_prompt(self) -> Any:
        return self.prompt if self.collect_log else None

    def logged_answer(self) -> str | None:
        return self.answer if self.collect_log else None


def _timed_out(step: str) -> RequestTimeout:
    return RequestTimeout(f"the request ran past its time limit during {step}")
