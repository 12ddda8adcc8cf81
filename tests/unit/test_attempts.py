"""Retries and fallbacks as pure logic: which errors retry, which fall back, the delays, and the headers."""

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from cirrus.catalog.spec import ArtifactRef, ModelSpec
from cirrus.errors import (
    CapacityExceeded,
    CirrusError,
    InvalidInput,
    ModelNotInstalled,
    RequestTimeout,
    WorkerCrashed,
)
from cirrus.gateway.attempts import Backoff, RetryPolicy, first_to_answer

ARTIFACT = ArtifactRef(path="/nowhere.gguf")
PRIMARY = ModelSpec(id="@cf/test/primary", artifact=ARTIFACT, max_attempts=3)
SECOND = ModelSpec(id="@cf/test/second", artifact=ARTIFACT)


def starter(
    outcomes: dict[str, list[CirrusError | None]], calls: list[str]
) -> Callable[[ModelSpec], Awaitable[str]]:
    async def start(spec: ModelSpec) -> str:
        calls.append(spec.id)
        outcome = outcomes[spec.id].pop(0)
        if outcome is not None:
            raise outcome
        return f"answer from {spec.id}"

    return start


async def test_capacity_errors_and_crashes_are_retried_on_the_same_model() -> None:
    calls: list[str] = []
    outcomes: dict[str, list[CirrusError | None]] = {
        PRIMARY.id: [CapacityExceeded("busy"), WorkerCrashed("crashed"), None]
    }
    answered = await first_to_answer([PRIMARY, SECOND], RetryPolicy(), starter(outcomes, calls))
    assert (answered.value, answered.step, answered.attempts) == (f"answer from {PRIMARY.id}", 0, 3)
    assert calls == [PRIMARY.id] * 3


async def test_when_attempts_run_out_the_next_model_answers() -> None:
    calls: list[str] = []
    outcomes: dict[str, list[CirrusError | None]] = {
        PRIMARY.id: [CapacityExceeded("busy")] * 2,
        SECOND.id: [None],
    }
    policy = RetryPolicy(max_attempts=2)
    answered = await first_to_answer([PRIMARY, SECOND], policy, starter(outcomes, calls))
    assert (answered.step, answered.attempts) == (1, 3)
    assert calls == [PRIMARY.id, PRIMARY.id, SECOND.id]


async def test_a_model_that_cannot_start_falls_back_without_retrying() -> None:
    calls: list[str] = []
    outcomes: dict[str, list[CirrusError | None]] = {
        PRIMARY.id: [ModelNotInstalled("absent")],
        SECOND.id: [None],
    }
    answered = await first_to_answer([PRIMARY, SECOND], RetryPolicy(), starter(outcomes, calls))
    assert answered.step == 1 and calls == [PRIMARY.id, SECOND.id]


async def test_the_caller_s_own_errors_are_neither_retried_nor_passed_on() -> None:
    calls: list[str] = []
    outcomes: dict[str, list[CirrusError | None]] = {PRIMARY.id: [InvalidInput("bad")], SECOND.id: [None]}
    with pytest.raises(InvalidInput):
        await first_to_answer([PRIMARY, SECOND], RetryPolicy(), starter(outcomes, calls))
    assert calls == [PRIMARY.id]


async def test_the_last_error_is_raised_when_every_model_fails() -> None:
    outcomes: dict[str, list[CirrusError | None]] = {
        SECOND.id: [WorkerCrashed("first"), WorkerCrashed("last")]
    }
    with pytest.raises(WorkerCrashed, match="last"):
        await first_to_answer([SECOND], RetryPolicy(max_attempts=2), starter(outcomes, []))


async def test_an_attempt_past_the_request_timeout_falls_back() -> None:
    async def start(spec: ModelSpec) -> str:
        if spec is PRIMARY:
            await asyncio.sleep(10)
        return spec.id

    answered = await first_to_answer([PRIMARY, SECOND], RetryPolicy(request_timeout_s=0.01), start)
    assert answered.value == SECOND.id
    with pytest.raises(RequestTimeout, match="cf-aig-request-timeout"):
        await first_to_answer([PRIMARY], RetryPolicy(request_timeout_s=0.01), start)


@pytest.mark.parametrize(
    "backoff, delays",
    [("constant", [0.1, 0.1, 0.1]), ("linear", [0.1, 0.2, 0.3]), ("exponential", [0.1, 0.2, 0.4])],
)
def test_backoff_delays(backoff: str, delays: list[float]) -> None:
    policy = RetryPolicy(delay_s=0.1, backoff=Backoff(backoff))
    assert [round(policy.delay_before_retry(n), 6) for n in (1, 2, 3)] == delays


def test_headers_make_a_policy() -> None:
    headers = {
        "cf-aig-max-attempts": "4",
        "cf-aig-retry-delay": "250",
        "cf-aig-backoff": "Exponential",
        "cf-aig-request-timeout": "1500",
    }
    assert RetryPolicy.from_headers(headers) == RetryPolicy(4, 0.25, Backoff.EXPONENTIAL, 1.5)
    assert RetryPolicy.from_headers({}).attempts_for(PRIMARY) == PRIMARY.max_attempts


@pytest.mark.parametrize(
    "header, value",
    [
        ("cf-aig-max-attempts", "0"),
        ("cf-aig-max-attempts", "6"),
        ("cf-aig-max-attempts", "two"),
        ("cf-aig-retry-delay", "5001"),
        ("cf-aig-retry-delay", "-1"),
        ("cf-aig-request-timeout", "0"),
        ("cf-aig-backoff", "sometimes"),
    ],
)
def test_bad_headers_are_refused_naming_the_header(header: str, value: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        RetryPolicy.from_headers({header: value})
    assert refused.value.param == header and header in refused.value.message
