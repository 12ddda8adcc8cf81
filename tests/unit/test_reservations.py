"""Budget reservations with fakes: the estimate's arithmetic, holds released exactly once, concurrent admissions
that cannot race past a budget, and budgets that keep working while the usage store is unavailable."""

import asyncio
import math
from pathlib import Path

import pytest

from cirrus.auth import Principal
from cirrus.catalog import ArtifactRef, ModelSpec
from cirrus.catalog.spec import Pricing
from cirrus.db.database import Database
from cirrus.errors import DailyAllocationExhausted, DependencyUnavailable, SpendLimitReached
from cirrus.metering.budgets import BudgetGuard
from cirrus.metering.estimate import Estimate, TokenEstimator, prompt_chars
from cirrus.metering.meter import Meter
from cirrus.metering.neurons import neurons_for
from cirrus.metering.periods import utc_day, utc_month
from cirrus.metering.record import UsageRecord
from cirrus.metering.reservations import Reservation, Reservations, nothing_reserved
from cirrus.metering.shared_holds import SharedHolds
from cirrus.runtime.params import GenerationInput, SamplingParams
from tests.unit.records import usage_record

NOW = 1_741_975_200.0  # 2025-03-14 18:00 UTC
DAY, MONTH = utc_day(NOW), utc_month(NOW)
SPEC = ModelSpec(
    id="@cf/test/priced",
    artifact=ArtifactRef(path="/x.gguf"),
    context_window=1000,
    pricing=Pricing(input_per_million=10.0, output_per_million=20.0),
)


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


class Totals:
    """A usage store that takes a few turns of the event loop to answer, as a real one does, or that is down."""

    def __init__(self, neurons: float = 0.0, spend: float = 0.0) -> None:
        self.neurons = neurons
        self.spend = spend
        self.down = False
        self.reads = 0

    async def _answer(self, value: float) -> float:
        self.reads += 1
        for _ in range(3):
            await asyncio.sleep(0)
        if self.down:
            raise DependencyUnavailable("the database is unavailable", retry_after_s=2.0)
        return value

    async def neurons_today(self, account_id: str, day: str) -> float:
        return await self._answer(self.neurons)

    async def spend_this_month(self, token_id: str, month: str) -> float:
        return await self._answer(self.spend)


class NoWrites:
    async def write(self, records: object) -> None:
        raise AssertionError("these tests never flush")


def guard(tmp_path: Path, totals: Totals, allocation: float = 1.0) -> BudgetGuard:
    meter = Meter(NoWrites(), tmp_path / "unwritten.jsonl", lambda: NOW)
    return BudgetGuard(totals, meter, default_daily_neurons=allocation, clock=lambda: NOW)


def principal(limit: float | None = None) -> Principal:
    return Principal(account_id="acct", token_id="tok", token_name="t", monthly_spend_limit_usd=limit)


def record(neurons: float) -> UsageRecord:
    return usage_record(
        neurons=neurons, request_id="r", model=SPEC.id, prompt_tokens=1, completion_tokens=1, started_at=NOW
    )


# The estimate


def test_an_estimate_is_the_prompt_s_characters_and_max_tokens_at_the_model_s_price() -> None:
    estimator = TokenEstimator(chars_per_token=4.0, overhead_tokens=32)
    inputs = GenerationInput(prompt="x" * 101, sampling=SamplingParams(max_tokens=50))
    estimate = estimator.generation(SPEC, inputs)
    prompt = math.ceil(101 / 4) + 32  # 26 + 32
    assert estimate.cost_usd == pytest.approx((prompt * 10 + 50 * 20) / 1e6)
    assert estimate.neurons == pytest.approx(neurons_for(estimate.cost_usd))
    huge = GenerationInput(prompt="x" * 100_000, sampling=SamplingParams(max_tokens=5000))
    assert estimator.generation(SPEC, huge).cost_usd == pytest.approx((1000 * 10 + 1000 * 20) / 1e6)
    texts = estimator.embedding(SPEC, ["abcd", "efgh"])
    assert texts.cost_usd == pytest.approx(2 * (1 + 32) * 10 / 1e6)


def test_messages_and_tools_count_as_the_json_the_template_renders() -> None:
    chat = GenerationInput(messages=({"role": "user", "content": "héllo"},), tools=({"name": "f"},))
    assert prompt_chars(chat) == len('[{"role": "user", "content": "héllo"}]') + len('[{"name": "f"}]')
    assert prompt_chars(GenerationInput(prompt="abc")) == 3


# Holds


def test_a_reservation_is_released_exactly_once() -> None:
    holds = Reservations()
    first = holds.hold(("acct", DAY), ("tok", MONTH), Estimate(0.002, 3.0))
    second = holds.hold(("acct", DAY), None, Estimate(0.001, 1.5))
    assert holds.neurons.held(("acct", DAY)) == pytest.approx(4.5)
    assert holds.spend.held(("tok", MONTH)) == pytest.approx(0.002)
    first.release()
    first.release()  # every path that ends a request may release it
    assert holds.neurons.held(("acct", DAY)) == pytest.approx(1.5)
    assert holds.spend.held(("tok", MONTH)) == 0
    assert holds.spend.snapshot() == {}
    second.release()
    assert holds.neurons.snapshot() == {}  # forgotten, not kept at float residue
    nothing_reserved().release()


# Budgets under concurrency


async def test_sixteen_concurrent_requests_on_room_for_one_admit_one(tmp_path: Path) -> None:
    budget = guard(tmp_path, Totals(neurons=0.0), allocation=0.01)
    estimate = Estimate(cost_usd=5e-6, neurons=0.45)

    async def one() -> bool:
        try:
            await budget.admit(principal(), "free", None, estimate)
        except DailyAllocationExhausted:
            return False
        return True

    admitted = await asyncio.gather(*(one() for _ in range(16)))
    assert sum(admitted) == 1
    assert budget.reservations.neurons.held(("acct", DAY)) == pytest.approx(0.45)


async def test_a_released_request_frees_its_room_and_a_settled_one_hands_over_to_the_meter(
    tmp_path: Path,
) -> None:
    budget = guard(tmp_path, Totals(neurons=0.0), allocation=1.0)
    used = ("acct", DAY)

    async def admit() -> Reservation:
        return await budget.admit(principal(), "free", None, Estimate(1e-6, 0.6))

    first = await admit()  # 0 used
    second = await admit()  # 0.6 held: still below 1.0
    with pytest.raises(DailyAllocationExhausted):  # 1.2 held
        await admit()
    assert budget.reservations.neurons.requests(used) == 2
    second.release()  # it failed before costing anything
    third = await admit()
    budget._meter.record(record(0.1))  # the first request's actual cost is metered...
    first.release()  # ...in the same step as its reservation goes
    assert await budget.neurons_used(*used) == pytest.approx(0.1)
    assert budget.reservations.neurons.held(used) == pytest.approx(0.6)
    await admit()  # 0.1 + 0.6
    with pytest.raises(DailyAllocationExhausted):  # 0.1 + 1.2
        await admit()
    assert third is not None


async def test_a_token_s_spend_limit_counts_running_requests(tmp_path: Path) -> None:
    budget = guard(tmp_path, Totals(spend=0.0), allocation=1e9)
    limited = principal(limit=1e-5)
    estimate = Estimate(cost_usd=8e-6, neurons=0.7)
    results = await asyncio.gather(
        *(budget.admit(limited, "paid", None, estimate) for _ in range(4)), return_exceptions=True
    )
    assert sum(not isinstance(r, BaseException) for r in results) == 2  # 0, then 8e-6: both below 1e-5
    assert all(isinstance(r, SpendLimitReached) for r in results if isinstance(r, BaseException))
    assert budget.reservations.spend.held(("tok", MONTH)) == pytest.approx(16e-6)


async def test_a_paid_account_is_never_refused_for_neurons(tmp_path: Path) -> None:
    budget = guard(tmp_path, Totals(neurons=50.0), allocation=1.0)
    for _ in range(3):
        await budget.admit(principal(), "paid", None, Estimate(1e-5, 1.0))
    assert budget.reservations.neurons.held(("acct", DAY)) == pytest.approx(3.0)


async def test_check_alone_holds_nothing(tmp_path: Path) -> None:
    budget = guard(tmp_path, Totals(neurons=0.5), allocation=1.0)
    for _ in range(3):
        await budget.check(principal(), "free", None)
    assert budget.reservations.neurons.snapshot() == {}


# The store unavailable


async def test_budgets_count_the_last_totals_seen_while_the_store_is_unavailable(tmp_path: Path) -> None:
    totals = Totals(neurons=0.7)
    meter = Meter(NoWrites(), tmp_path / "unwritten.jsonl", lambda: NOW)
    # No totals cache: every admission reads, so the outage is met at once.
    budget = BudgetGuard(totals, meter, default_daily_neurons=1.0, clock=lambda: NOW, cache_ttl_s=0.0)

    async def admit() -> Reservation:
        return await budget.admit(principal(), "free", None, Estimate(1e-6, 0.2))

    first = await admit()  # reads 0.7
    totals.down = True
    meter.record(record(0.1))
    first.release()
    await admit()  # 0.7 last seen + 0.1 pending: below 1.0
    with pytest.raises(DailyAllocationExhausted):  # 0.7 + 0.1 + 0.2 held
        await admit()
    assert totals.reads == 3
    fresh = guard(tmp_path, totals, allocation=1.0)  # never read before the outage: 0, not a failed request
    await fresh.admit(principal(), "free", None, Estimate(1e-6, 0.2))


# Across gateways on one database


async def test_gateways_on_one_database_see_each_other_s_reservations(
    database: Database, tmp_path: Path
) -> None:
    clock = Clock()
    gateways = []
    for name in ("one", "two"):
        reservations = Reservations()
        shared = SharedHolds(database, reservations, clock=clock, stale_s=30.0, read_every_s=0.0)
        await shared.migrate()
        meter = Meter(NoWrites(), tmp_path / f"{name}.jsonl", clock)
        budget = BudgetGuard(
            Totals(), meter, 1.0, clock=clock, cache_ttl_s=0.0, reservations=reservations, shared=shared
        )
        gateways.append((budget, shared))
    (one, one_shared), (two, two_shared) = gateways

    held = await one.admit(principal(), "free", None, Estimate(1e-6, 1.5))
    racing = await two.admit(principal(), "free", None, Estimate(1e-6, 1.5))  # not published yet: the window
    await one_shared.publish()
    await two_shared.publish()
    for budget in (one, two):
        with pytest.raises(DailyAllocationExhausted):
            await budget.admit(principal(), "free", None, Estimate(1e-6, 1.5))
    racing.release()
    await two_shared.close()  # a gateway that stops takes its rows away
    with pytest.raises(DailyAllocationExhausted):  # one's reservation is still published
        await two.admit(principal(), "free", None, Estimate(1e-6, 1.5))
    held.release()
    await one_shared.publish()  # released: the row goes
    await two.admit(principal(), "free", None, Estimate(1e-6, 1.5))

    # A gateway killed without closing: its rows stop counting once stale.
    await one.admit(principal(), "free", None, Estimate(1e-6, 1.5))
    await one_shared.publish()
    assert len(await database.fetch_all("SELECT * FROM budget_holds")) == 1
    clock.now += 31.0
    reservations = Reservations()
    third = BudgetGuard(
        Totals(),
        Meter(NoWrites(), tmp_path / "third.jsonl", clock),
        1.0,
        clock=clock,
        cache_ttl_s=0.0,
        reservations=reservations,
        shared=SharedHolds(database, reservations, clock=clock, stale_s=30.0),
    )
    await third.admit(principal(), "free", None, Estimate(1e-6, 1.5))


async def test_an_idle_gateway_writes_nothing(database: Database) -> None:
    shared = SharedHolds(database, Reservations())
    await shared.migrate()
    await shared.publish()
    assert await database.fetch_all("SELECT * FROM budget_holds") == []


async def test_what_other_gateways_hold_is_read_at_most_once_per_read_interval(database: Database) -> None:
    clock = Clock()
    mine, theirs = Reservations(), Reservations()
    reader = SharedHolds(database, mine, clock=clock, read_every_s=0.5)
    writer = SharedHolds(database, theirs, clock=clock)
    await reader.migrate()
    assert await reader.held_elsewhere("neurons", "acct", "2026-12-01") == 0.0
    theirs.hold(("acct", "2026-12-01"), None, Estimate(1e-6, 2.0))
    await writer.publish()
    assert await reader.held_elsewhere("neurons", "acct", "2026-12-01") == 0.0  # within the interval: cached
    clock.now += 0.5
    assert await reader.held_elsewhere("neurons", "acct", "2026-12-01") == 2.0


class SlowSpend(Totals):
    """The spend total answers last; meanwhile `during` runs (another request is metered)."""

    def __init__(self, during: "list[object]") -> None:
        super().__init__()
        self.during = during

    async def spend_this_month(self, token_id: str, month: str) -> float:
        for _ in range(6):
            await asyncio.sleep(0)
        for work in self.during:
            assert callable(work)
            work()
        return self.spend


async def test_a_request_metered_while_the_other_total_is_read_is_counted(tmp_path: Path) -> None:
    """Its hold goes and its pending usage comes in one step; the check must see the pending usage."""
    during: list[object] = []
    meter = Meter(NoWrites(), tmp_path / "unwritten.jsonl", lambda: NOW)
    budget = BudgetGuard(SlowSpend(during), meter, 1.0, clock=lambda: NOW, cache_ttl_s=0.0)
    running = await budget.admit(principal(limit=1.0), "free", None, Estimate(1e-6, 0.9))

    def metered() -> None:
        meter.record(record(neurons=1.0))
        running.release()

    during.append(metered)
    with pytest.raises(DailyAllocationExhausted):
        await budget.admit(principal(limit=1.0), "free", None, Estimate(1e-6, 0.01))
