"""A circuit breaker: after a dependency fails, stop asking it for a while, then let one probe through.

Why: a frozen server does not refuse, it stays silent, so every request would wait out the whole timeout. After
`failures_to_open` consecutive failures the breaker opens and callers skip the dependency at once (each decides
what skipping means: fail open, use a stale value, or answer 503). After `reset_after_s` one caller is let
through as a probe (half-open); its success closes the breaker, its failure opens it again. Pure logic with an
injected clock: the caller runs the work and reports how it went.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import TypeVar

T = TypeVar("T")


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class BreakerOpen(Exception):
    """The breaker skipped the call: the dependency failed recently and no probe is due."""

    def __init__(self, name: str) -> None:
        super().__init__(f"{name} is unavailable (circuit open)")
        self.name = name


class CircuitBreaker:
    def __init__(
        self,
        name: str,
        *,
        failures_to_open: int = 1,
        reset_after_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[str, BreakerState], None] | None = None,
    ) -> None:
        self.name = name
        self._failures_to_open = failures_to_open
        self._reset_after_s = reset_after_s
        self._clock = clock
        self._on_change = on_change
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._opened_at = 0.0

    @property
    def state(self) -> BreakerState:
        return self._state

    def retry_after_s(self) -> float:
        """How long until the next probe may run (0 when closed)."""
        if self._state is BreakerState.CLOSED:
            return 0.0
        return max(0.0, self._opened_at + self._reset_after_s - self._clock())

    def allow(self) -> bool:
        """Whether to try the dependency now. Past the reset time exactly one caller gets True (the probe)
        until it reports; everyone else keeps skipping."""
        if self._state is BreakerState.CLOSED:
            return True
        if self._state is BreakerState.OPEN and self._clock() - self._opened_at >= self._reset_after_s:
            self._set(BreakerState.HALF_OPEN)
            return True
        return False

    def succeeded(self) -> None:
        self._failures = 0
        if self._state is not BreakerState.CLOSED:
            self._set(BreakerState.CLOSED)

    def failed(self) -> None:
        self._failures += 1
        if self._state is BreakerState.HALF_OPEN or self._failures >= self._failures_to_open:
            self._opened_at = self._clock()
            if self._state is not BreakerState.OPEN:
                self._set(BreakerState.OPEN)

    async def call(self, work: Callable[[], Awaitable[T]], is_failure: Callable[[BaseException], bool]) -> T:
        """Run `work` if allowed, recording the outcome; raise BreakerOpen if skipped. Exceptions for which
        `is_failure` is False (a caller's mistake, not the dependency's) count as success and are re-raised."""
        if not self.allow():
            raise BreakerOpen(self.name)
        try:
            result = await work()
        except BaseException as exc:
            # A probe whose caller left proved nothing: the dependency stays suspect for another period.
            probe_left = self._state is BreakerState.HALF_OPEN and isinstance(exc, asyncio.CancelledError)
            if probe_left or is_failure(exc):
                self.failed()
            elif self._state is BreakerState.HALF_OPEN:
                self.succeeded()
            raise
        self.succeeded()
        return result

    def _set(self, state: BreakerState) -> None:
        self._state = state
        if self._on_change is not None:
            self._on_change(self.name, state)
