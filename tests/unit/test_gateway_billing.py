"""The gateway pipeline's billing with fakes for what it calls: an answer that ends early is metered once, after
its generation closed, with what the worker processed; the budget's reservation is let go exactly when the usage
is metered, or when the request is refused; and the gateway's own steps count against the request's deadline."""

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from starlette.requests import Request

from cirrus.api.calls import call_of
from cirrus.auth import Principal
from cirrus.auth.store import Account, Plan
from cirrus.catalog import ArtifactRef, ModelSpec
from cirrus.catalog.spec import Pricing
from cirrus.config import Settings
from cirrus.errors import (
    CapacityExceeded,
    CirrusError,
    DailyAllocationExhausted,
    RateLimited,
    RequestTimeout,
    WorkerCrashed,
)
from cirrus.gateway.answer import Ending
from cirrus.gateway.attempts import RetryPolicy, first_to_answer
from cirrus.gateway.call import Call
from cirrus.gateway.components import GatewayParts
from cirrus.gateway.pipeline import Pipeline
from cirrus.metering.budgets import BudgetGuard
from cirrus.metering.meter import Meter
from cirrus.metering.periods import utc_day
from cirrus.metering.record import UsageRecord
from cirrus.ratelimit.status import UNKNOWN_STATUS, RateStatus
from cirrus.runtime.events import Finished, GenerationEvent, TextDelta
from cirrus.runtime.params import GenerationInput, SamplingParams, Usage
from cirrus.runtime.progress import Progress
from cirrus.service import InferenceRequest

SPEC = ModelSpec(
    id="@cf/test/billed",
    artifact=ArtifactRef(path="/x.gguf"),
    pricing=Pricing(input_per_million=10.0, output_per_million=20.0),
)
CONFIRMED = Usage(40, 3)  # what the worker reports when it confirms a cancel
BEST_KNOWN = Usage(40, 2)  # what the frames had said before that


class FakeGeneration:
    """Streams `tokens` text events then a finish (or raises `error` after them); closing it cancels in the
    'worker', which confirms its count a moment later, as a real worker does."""

    def __init__(self, tokens: int, error: CirrusError | None = None) -> None:
        self.tokens = tokens
        self.error = error
        self.cold_start = False
        self.queue_s = 0.0
        self.node_id: str | None = None
        self.closes = 0
        self.confirmed = False

    async def __aiter__(self) -> AsyncIterator[GenerationEvent]:
        try:
            for _ in range(self.tokens):
                yield TextDelta("tok")
                await asyncio.sleep(0)
            if self.error is not None:
                raise self.error
            self.confirmed = True
            yield Finished("stop", Usage(40, self.tokens))
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        self.closes += 1
        if self.closes == 1:
            await asyncio.sleep(0.01)
            self.confirmed = True

    def processed_usage(self) -> Usage:
        return CONFIRMED if self.confirmed else BEST_KNOWN


class FakeService:
    def __init__(self) -> None:
        self.generations: list[FakeGeneration] = []
        self.next: FakeGeneration | None = None
        self.deadlines: list[float | None] = []
        self.fail: CirrusError | None = None  # raised before the first token, once the prompt was read

    async def start(self, request: InferenceRequest, progress: Progress | None = None) -> FakeGeneration:
        self.deadlines.append(request.deadline)
        if self.fail is not None:
            assert progress is not None
            progress.sent = progress.started = True
            progress.prompt_tokens = 900
            raise self.fail
        generation = self.next or FakeGeneration(tokens=5)
        self.generations.append(generation)
        return generation


class FakeLimiter:
    def __init__(self) -> None:
        self.refuse = False
        self.charged: list[int] = []

    async def admit(self, principal: Principal, spec: ModelSpec) -> RateStatus:
        await asyncio.sleep(0)
        if self.refuse:
            raise RateLimited("too many requests", retry_after_s=1.0)
        return UNKNOWN_STATUS

    async def consume_tokens(self, principal: Principal, spec: ModelSpec, tokens: int) -> None:
        self.charged.append(tokens)


class RecordingMeter(Meter):
    def __init__(self, path: Path) -> None:
        super().__init__(NoWrites(), path)
        self.records: list[UsageRecord] = []

    def record(self, record: UsageRecord) -> None:
        self.records.append(record)
        super().record(record)


class NoWrites:
    async def write(self, records: object) -> None:
        return None


class NoTotals:
    async def neurons_today(self, account_id: str, day: str) -> float:
        await asyncio.sleep(0)
        return 0.0

    async def spend_this_month(self, token_id: str, month: str) -> float:
        return 0.0


class PassGuard:
    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s

    def check(self, inputs: GenerationInput) -> GenerationInput:
        return inputs


def make_pipeline(tmp_path: Path, guard_delay_s: float = 0.0) -> tuple[Pipeline, SimpleNamespace]:
    meter = RecordingMeter(tmp_path / "unwritten.jsonl")
    account = Account("acct", "a", Plan.FREE, 1_000.0, (), 0.0)

    async def account_of(account_id: str) -> Account:
        return account

    async def input_guard(principal: Principal, spec: ModelSpec) -> PassGuard:
        await asyncio.sleep(guard_delay_s)
        return PassGuard()

    parts = SimpleNamespace(
        settings=Settings(),
        catalog=SimpleNamespace(get=lambda model: SPEC),
        service=FakeService(),
        metrics=SimpleNamespace(rate_limited=lambda *a: None, budget_refused=lambda *a: None),
        input_guard=input_guard,
        cache=SimpleNamespace(key_for=lambda *a: None),
        limiter=FakeLimiter(),
        account=account_of,
        budgets=BudgetGuard(NoTotals(), meter, 1_000.0),
        meter=meter,
        chain=lambda principal, spec: [spec],
        output_filter=lambda spec: None,
    )
    return Pipeline(cast(GatewayParts, parts)), parts


def call(deadline: float | None = None) -> Call:
    principal = Principal(account_id="acct", token_id="tok", token_name="t")
    return Call("req-1", principal, "workers-ai", {}, stream=True, deadline=deadline)


def request(max_tokens: int = 100) -> InferenceRequest:
    return InferenceRequest(
        "req-1", SPEC.id, GenerationInput(prompt="hello", sampling=SamplingParams(max_tokens))
    )


def held(parts: SimpleNamespace) -> float:
    budgets: BudgetGuard = parts.budgets
    return budgets.reservations.neurons.held(("acct", utc_day(parts.meter._clock())))


async def test_a_stream_the_client_leaves_is_metered_after_close_with_what_the_worker_processed(
    tmp_path: Path,
) -> None:
    pipeline, parts = make_pipeline(tmp_path)
    the_call = call()
    answer = await pipeline.run(the_call, request())
    assert held(parts) > 0  # admitted: its estimate is held
    seen = []
    async for event in answer:
        seen.append(event)
        if len(seen) == 2:
            break  # the client left
    assert parts.meter.records == []
    assert the_call.billed_later and the_call.record is None
    logged: list[UsageRecord] = []
    the_call.when_recorded(logged.append)  # as the access log does for a response that ended first
    await answer.aclose()  # what the route does when its client is gone
    await pipeline.drain()
    assert logged == parts.meter.records
    assert [(r.status, r.prompt_tokens, r.completion_tokens) for r in parts.meter.records] == [(499, 40, 3)]
    assert parts.meter.records[0].neurons > 0
    assert held(parts) == 0  # the meter's pending usage took over
    assert parts.meter.pending_neurons("acct", utc_day(parts.meter._clock())) > 0
    assert parts.limiter.charged == [43]  # counts against tokens per minute too
    await answer.aclose()
    await pipeline.drain()
    assert len(parts.meter.records) == 1


async def test_work_the_platform_stopped_is_recorded_at_no_cost_and_outside_the_limits(
    tmp_path: Path,
) -> None:
    """A batch item preempted for an interactive request: the item runs again and pays then."""
    pipeline, parts = make_pipeline(tmp_path)
    the_call = call()
    answer = await pipeline.run(the_call, request())
    async for _ in answer:
        the_call.waived = True  # what the batch item's preemption does before it stops the work
        break
    await answer.aclose()
    await pipeline.drain()
    [record] = parts.meter.records
    assert (record.status, record.prompt_tokens) == (499, 40)
    assert (record.neurons, record.cost_usd) == (0.0, 0.0)
    assert parts.limiter.charged == []
    assert held(parts) == 0


async def test_a_finished_answer_is_metered_once_with_its_own_usage(tmp_path: Path) -> None:
    pipeline, parts = make_pipeline(tmp_path)
    completion = await (await pipeline.run(call(), request())).collect()
    await pipeline.drain()
    assert completion.usage == Usage(40, 5)
    assert [(r.status, r.completion_tokens) for r in parts.meter.records] == [(200, 5)]
    assert held(parts) == 0


async def test_an_answer_past_its_time_limit_mid_stream_is_metered_as_408(tmp_path: Path) -> None:
    pipeline, parts = make_pipeline(tmp_path)
    parts.service.next = FakeGeneration(tokens=2, error=RequestTimeout("past the limit"))
    answer = await pipeline.run(call(), request())
    with pytest.raises(RequestTimeout):
        await answer.collect()
    await pipeline.drain()
    (record,) = parts.meter.records
    assert (record.status, record.error_code) == (408, 3007)
    assert (record.prompt_tokens, record.completion_tokens) == (40, 3)


async def test_an_answer_never_iterated_is_still_metered_once(tmp_path: Path) -> None:
    pipeline, parts = make_pipeline(tmp_path)
    answer = await pipeline.run(call(), request())
    await answer.aclose()
    await answer.aclose()
    await pipeline.drain()
    assert [(r.status, r.prompt_tokens) for r in parts.meter.records] == [(499, 40)]
    assert held(parts) == 0


async def test_a_consumer_cancelled_mid_stream_still_bills_once_the_generation_closed(tmp_path: Path) -> None:
    pipeline, parts = make_pipeline(tmp_path)
    parts.service.next = FakeGeneration(tokens=10_000)
    answer = await pipeline.run(call(), request())
    started = asyncio.Event()

    async def consume() -> None:
        async for _ in answer:
            started.set()

    consumer = asyncio.create_task(consume())
    await started.wait()
    consumer.cancel()  # as a streaming response is when its client disconnects
    await asyncio.gather(consumer, return_exceptions=True)
    await pipeline.drain()
    (record,) = parts.meter.records
    assert record.status == 499 and record.completion_tokens > 0
    assert held(parts) == 0


async def test_a_time_limit_before_the_first_token_meters_the_prompt_the_worker_read(tmp_path: Path) -> None:
    pipeline, parts = make_pipeline(tmp_path)
    parts.service.fail = RequestTimeout("past the limit")
    with pytest.raises(RequestTimeout):
        await pipeline.run(call(), request())
    (record,) = parts.meter.records
    assert (record.status, record.error_code, record.prompt_tokens, record.completion_tokens) == (
        408,
        3007,
        900,
        0,
    )
    assert record.neurons > 0 and held(parts) == 0
    await pipeline.drain()
    assert parts.limiter.charged == [900]


async def test_a_refused_request_lets_its_reservation_go(tmp_path: Path) -> None:
    pipeline, parts = make_pipeline(tmp_path)
    parts.limiter.refuse = True
    with pytest.raises(RateLimited):
        await pipeline.run(call(), request())
    assert held(parts) == 0
    assert [r.status for r in parts.meter.records] == [429]


async def test_concurrent_requests_past_a_small_allocation_run_one(tmp_path: Path) -> None:
    pipeline, parts = make_pipeline(tmp_path)
    account = Account("acct", "a", Plan.FREE, 0.01, (), 0.0)

    async def account_of(account_id: str) -> Account:
        return account

    parts.account = account_of
    outcomes = await asyncio.gather(
        *(pipeline.run(call(), request()) for _ in range(16)), return_exceptions=True
    )
    answers = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(answers) == 1
    assert all(isinstance(o, DailyAllocationExhausted) for o in outcomes if isinstance(o, BaseException))
    assert len(parts.service.generations) == 1
    for answer in answers:
        await answer.aclose()


async def test_the_gateway_s_own_steps_count_against_the_deadline(tmp_path: Path) -> None:
    pipeline, parts = make_pipeline(tmp_path, guard_delay_s=5.0)
    deadline = asyncio.get_running_loop().time() + 0.05
    with pytest.raises(RequestTimeout) as timed_out:
        await pipeline.run(call(deadline), request())
    assert (timed_out.value.status, timed_out.value.code) == (408, 3007)
    assert parts.service.generations == []
    assert [r.status for r in parts.meter.records] == [408]
    assert held(parts) == 0


async def test_the_deadline_set_at_arrival_is_the_service_s(tmp_path: Path) -> None:
    pipeline, parts = make_pipeline(tmp_path)
    deadline = asyncio.get_running_loop().time() + 30
    await (await pipeline.run(call(deadline), request())).collect()
    assert parts.service.deadlines == [deadline]


def test_ending_bills_exactly_once() -> None:
    ends: list[Any] = []
    bills: list[Any] = []
    ending = Ending(lambda f, e, t: ends.append((f, e, t)), lambda u, f, e, t: bills.append((u, f, e, t)))
    finished = Finished("stop", Usage(3, 4))
    ending.ended(finished, None, "abc")
    ending.ended(None, None, "abc")
    ending.closed(lambda: Usage(99, 99))
    assert bills == [(Usage(3, 4), finished, None, "abc")]
    assert len(ends) == 1

    early = Ending(lambda f, e, t: ends.append((f, e, t)), lambda u, f, e, t: bills.append((u, f, e, t)))
    error = RequestTimeout("late")
    early.ended(None, error, "a")
    assert len(bills) == 1  # not before the generation closed
    early.closed(lambda: Usage(7, 1))
    early.closed(lambda: Usage(8, 8))
    assert bills[1] == (Usage(7, 1), None, error, "a")

    never = Ending(lambda f, e, t: ends.append((f, e, t)), lambda u, f, e, t: bills.append((u, f, e, t)))
    never.closed(lambda: Usage(5, 0))
    assert ends[-1] == (None, None, "") and bills[-1] == (Usage(5, 0), None, None, "")


async def test_no_retry_or_fallback_starts_past_the_request_s_deadline() -> None:
    calls: list[str] = []

    async def busy(spec: ModelSpec) -> str:
        calls.append(spec.id)
        raise CapacityExceeded("busy")

    chain = [SPEC.model_copy(update={"max_attempts": 3}), SPEC]
    policy = RetryPolicy(delay_s=30.0)  # a retry delay far past the deadline is cut to what is left
    deadline = asyncio.get_running_loop().time() + 0.05
    with pytest.raises(RequestTimeout):
        await first_to_answer(chain, policy, busy, deadline=deadline)
    assert calls == [SPEC.id]


async def test_a_call_s_deadline_runs_from_the_request_s_arrival() -> None:
    arrived = asyncio.get_running_loop().time() - 2.0  # the request id middleware stamped it 2 s ago
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/ai/run/x",
        "headers": [],
        "state": {"arrived_at": arrived},
    }
    the_call = call_of(Request(scope), stream=False, timeout_s=5.0)
    assert the_call.deadline == pytest.approx(arrived + 5.0)
    remaining = the_call.remaining_s()
    assert remaining is not None and remaining <= 3.0
    assert call_of(Request({"type": "http", "path": "/", "headers": []}), stream=False).deadline is None


async def test_an_attempt_that_read_the_prompt_before_failing_is_billed_with_the_answer(
    tmp_path: Path,
) -> None:
    pipeline, parts = make_pipeline(tmp_path)
    parts.chain = lambda principal, spec: [spec, spec]  # falls back (to the same model) after a crash
    failures: list[CirrusError] = [WorkerCrashed("the worker died after reading the prompt")]
    start = parts.service.start

    async def crash_once(request: InferenceRequest, progress: Progress | None = None) -> FakeGeneration:
        parts.service.fail = failures.pop() if failures else None
        generation: FakeGeneration = await start(request, progress)
        return generation

    parts.service.start = crash_once
    completion = await (await pipeline.run(call(), request())).collect()
    await pipeline.drain()
    (record,) = parts.meter.records
    assert completion.usage == Usage(40, 5)  # the caller sees the answer's own usage
    assert (record.status, record.attempts) == (200, 2)
    assert (record.prompt_tokens, record.completion_tokens) == (900 + 40, 5)
