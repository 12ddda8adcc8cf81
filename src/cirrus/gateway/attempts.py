"""Retries and fallbacks (AI Gateway's semantics): try a model again on capacity errors and crashes, then the
next model of its fallback chain. Only a generation's start is retried, never a stream already answering."""

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

from cirrus.catalog import ModelSpec
from cirrus.errors import (
    CapacityExceeded,
    CirrusError,
    InvalidInput,
    ModelNotInstalled,
    ModelTooLarge,
    RequestTimeout,
    WorkerCrashed,
    WorkerStartFailed,
)

T = TypeVar("T")

RETRY_ON: tuple[type[CirrusError], ...] = (CapacityExceeded, WorkerCrashed, WorkerStartFailed)
FALL_BACK_ON: tuple[type[CirrusError], ...] = (*RETRY_ON, RequestTimeout, ModelTooLarge, ModelNotInstalled)
MAX_ATTEMPTS = 5
MAX_RETRY_DELAY_MS = 5000


class Backoff(StrEnum):
    CONSTANT = "constant"
    LINEAR = "linear"
    EXPONENTIAL = "exponential"


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int | None = None  # None: the catalog entry's own
    delay_s: float = 0.0
    backoff: Backoff = Backoff.CONSTANT
    request_timeout_s: float | None = None  # for each attempt to reach its first token

    @classmethod
    def from_headers(cls, headers: Mapping[str, str]) -> "RetryPolicy":
        attempts = _int_header(headers, "cf-aig-max-attempts", 1, MAX_ATTEMPTS)
        delay_ms = _int_header(headers, "cf-aig-retry-delay", 0, MAX_RETRY_DELAY_MS)
        timeout_ms = _int_header(headers, "cf-aig-request-timeout", 1, 3_600_000)
        return cls(
            max_attempts=attempts,
            delay_s=(delay_ms or 0) / 1000,
            backoff=_backoff(headers.get("cf-aig-backoff")),
            request_timeout_s=None if timeout_ms is None else timeout_ms / 1000,
        )

    def attempts_for(self, spec: ModelSpec) -> int:
        return self.max_attempts or spec.max_attempts

    def delay_before_retry(self, retry: int) -> float:
        """`retry` counts from 1: the delay before the second attempt is delay_before_retry(1)."""
        if self.backoff is Backoff.LINEAR:
            return self.delay_s * retry
        if self.backoff is Backoff.EXPONENTIAL:
            return float(self.delay_s * 2 ** (retry - 1))
        return self.delay_s


@dataclass(frozen=True)
class Answered(Generic[T]):
    value: T
    step: int  # index in the chain of the model that answered
    attempts: int


async def first_to_answer(
    chain: Sequence[ModelSpec],
    policy: RetryPolicy,
    start: Callable[[ModelSpec], Awaitable[T]],
    deadline: float | None = None,
) -> Answered[T]:
    """`deadline` (the loop's clock) is the whole request's: no retry or fallback starts past it, and no delay
    before a retry outlasts it. `cf-aig-request-timeout` bounds each attempt on its own."""
    attempts = 0
    last_error: CirrusError | None = None
    for step, spec in enumerate(chain):
        for retry in range(policy.attempts_for(spec)):
            if retry:
                await _sleep_within(policy.delay_before_retry(retry), deadline)
            if attempts and _past(deadline):
                raise RequestTimeout("the request ran past its time limit before a model answered")
            attempts += 1
            try:
                return Answered(await _within(policy.request_timeout_s, start(spec)), step, attempts)
            except FALL_BACK_ON as error:
                last_error = error
                if not isinstance(error, RETRY_ON):
                    break
    assert last_error is not None, "a chain has at least one model"
    raise last_error


def _past(deadline: float | None) -> bool:
    return deadline is not None and asyncio.get_running_loop().time() >= deadline


async def _sleep_within(delay_s: float, deadline: float | None) -> None:
    if deadline is not None:
        delay_s = min(delay_s, max(0.0, deadline - asyncio.get_running_loop().time()))
    await asyncio.sleep(delay_s)


async def _within(timeout_s: float | None, work: Awaitable[T]) -> T:
    if timeout_s is None:
        return await work
    try:
        return await asyncio.wait_for(work, timeout_s)
    except TimeoutError:
        raise RequestTimeout(f"no answer within cf-aig-request-timeout ({timeout_s * 1000:.0f} ms)") from None


def _int_header(headers: Mapping[str, str], name: str, low: int, high: int) -> int | None:
    raw = headers.get(name)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise InvalidInput(f"header {name} must be an integer, got {raw!r}", param=name) from None
    if not low <= value <= high:
        raise InvalidInput(f"header {name} must be between {low} and {high}, got {value}", param=name)
    return value


def _backoff(raw: str | None) -> Backoff:
    if raw is None:
        return Backoff.CONSTANT
    try:
        return Backoff(raw.strip().lower())
    except ValueError:
        choices = ", ".join(b.value for b in Backoff)
        raise InvalidInput(
            f"header cf-aig-backoff must be one of {choices}, got {raw!r}", param="cf-aig-backoff"
        ) from None
