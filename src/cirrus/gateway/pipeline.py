"""The gateway's per-request pipeline, in the order a request meets it:

scope check -> input guardrails -> rate limits -> budget -> response cache (and joining an identical request in
flight) -> the model, with retries and fallbacks -> output filters -> metering, token limits, cache store.

Routes translate their protocol into a `GenerationInput` and call `resolve` then `run`; everything else is here.
Embeddings take the same steps through `embed`, less the response cache, the retries and the output filters.
A prompt's token count (`count_tokens`) takes the scope check, the input guard and the request rate limit only.

One time limit covers it all: the call's deadline (its arrival plus the request time limit) bounds the gateway's
steps here and is passed to the service as the request's. The budget holds the request's estimated cost from
admission until its usage is metered (`Call.reservation`); every path that ends a call meters it in `_record`,
which lets the reservation go in the same step, so the meter's pending usage takes over without a gap.
"""

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Sequence

from cirrus.auth import Permission
from cirrus.cache import CachedAnswer, CachePolicy, replay
from cirrus.cache.answer import CACHEABLE_FINISH_REASONS
from cirrus.catalog import ModelSpec
from cirrus.errors import (
    CirrusError,
    DailyAllocationExhausted,
    Forbidden,
    ModelForbidden,
    RateLimited,
    SpendLimitReached,
)
from cirrus.gateway.answer import Answer, Ending, observed
from cirrus.gateway.attempts import Answered, RetryPolicy, first_to_answer
from cirrus.gateway.billing import added, processed, processed_by, usage_record
from cirrus.gateway.call import Call
from cirrus.gateway.components import GatewayParts
from cirrus.gateway.inflight import InFlight
from cirrus.gateway.output import filtered
from cirrus.metering.estimate import Estimate, TokenEstimator, prompt_chars
from cirrus.metering.neurons import price
from cirrus.metering.record import CacheStatus, UsageRecord
from cirrus.metering.reservations import Reservation, nothing_reserved
from cirrus.runtime.embedding import EmbeddingInput
from cirrus.runtime.events import Finished
from cirrus.runtime.params import GenerationInput, Usage
from cirrus.runtime.progress import Progress
from cirrus.service import EmbeddingRequest, EmbeddingResult, InferenceRequest, StartedGeneration

GATEWAY_STEPS = "the gateway's checks (guardrails, limits, budget, cache)"

log = logging.getLogger(__name__)


class Pipeline:
    def __init__(self, parts: GatewayParts) -> None:
        self.parts = parts
        self.inflight: InFlight[CachedAnswer] = InFlight()
        self._background: set[asyncio.Task[None]] = set()
        settings = parts.settings
        self.estimator = TokenEstimator(
            settings.budget_chars_per_token, settings.budget_prompt_overhead_tokens
        )

    def resolve(self, call: Call, model: str) -> ModelSpec:
        """Scope before lookup: a token that may not use a model learns nothing about whether it exists."""
        principal = call.principal
        if not principal.can(Permission.RUN):
            raise Forbidden("Authentication error: this token lacks the run permission")
        if not principal.may_use(model):
            raise ModelForbidden("The account is not allowed to access this model", param="model")
        spec = self.parts.catalog.get(model)
        if not principal.may_use(spec.id):
            raise ModelForbidden("The account is not allowed to access this model", param="model")
        return spec

    async def run(self, call: Call, request: InferenceRequest) -> Answer:
        """`request.model` is the id `resolve` returned."""
        spec = self.parts.catalog.get(request.model)
        if request.deadline is None:
            request = dataclasses.replace(request, deadline=call.deadline)
        answer: Answer | None = None
        try:
            answer = await self._run(call, spec, request)
        except CirrusError as error:
            if call.record is None:  # else already metered with what the workers processed
                self._refused(call, spec, error)
            raise
        except asyncio.CancelledError:  # the client left before the answer started
            if call.record is None:
                self._record(
                    call, usage_record(call, spec, Usage(0, 0), 499, None, "BYPASS", False, 0.0, (0.0, 0.0))
                )
            raise
        finally:
            if answer is None:  # refused, failed or cancelled before an answer took the reservation over
                call.release_reservation()
        return answer

    async def _run(self, call: Call, spec: ModelSpec, request: InferenceRequest) -> Answer:
        policy = CachePolicy.from_headers(call.headers, self.parts.settings.cache_ttl_s)
        retry = RetryPolicy.from_headers(call.headers)
        chain = self.parts.chain(call.principal, spec)
        async with call.within_deadline(GATEWAY_STEPS):
            inputs = (await self.parts.input_guard(call.principal, spec)).check(request.inputs)
            call.prompt = inputs.messages if inputs.messages is not None else inputs.prompt
            request = dataclasses.replace(request, inputs=inputs)
            key = self.parts.cache.key_for(call.principal.account_id, spec.id, inputs, policy)
            cached = await self._admit_and_look_up(call, spec, self._estimate(chain, inputs), key)
        if key is None:
            call.cache_status = "BYPASS"
            return await self._live(call, chain, request, retry, None)
        if cached is None:
            cached = await self.inflight.wait_for(key, self._left_s(call))
            call.check_deadline("the wait for an identical request in flight")
        if cached is not None:
            call.cache_status = "HIT"
            return self._replayed(call, spec, cached)
        call.cache_status = "MISS"
        return await self._live(call, chain, request, retry, (key, policy.ttl_s))

    async def embed(self, call: Call, request: EmbeddingRequest) -> EmbeddingResult:
        """`request.model` is the id `resolve` returned. Metered on the model's input price."""
        spec = self.parts.catalog.get(request.model)
        if request.deadline is None:
            request = dataclasses.replace(request, deadline=call.deadline)
        call.cache_status = "BYPASS"
        progress = Progress()  # what the worker read, even if the request ends without its vectors
        try:
            async with call.within_deadline(GATEWAY_STEPS):
                texts = await self._guarded_texts(call, spec, request.inputs)
                await self._admit(call, spec, self.estimator.embedding(spec, texts))
            inputs = dataclasses.replace(request.inputs, texts=texts)
            result = await self.parts.service.embed(dataclasses.replace(request, inputs=inputs), progress)
        except CirrusError as error:
            if progress.sent:  # a time limit or a crash while the worker read the texts
                self._embedding_ended(call, spec, progress, error.status, error.code)
            else:
                self._refused(call, spec, error)
            raise
        except asyncio.CancelledError:  # the client left
            self._embedding_ended(call, spec, progress, 499, None)
            raise
        except BaseException:
            call.release_reservation()
            raise
        cost = price(spec, result.usage.prompt_tokens, 0, 0)
        usage = result.usage
        self._record(
            call,
            usage_record(call, spec, usage, 200, None, "BYPASS", result.cold_start, result.queue_s, cost),
        )
        self._spawn(self.parts.limiter.consume_tokens(call.principal, spec, result.usage.total_tokens))
        return result

    async def count_tokens(self, call: Call, request: InferenceRequest) -> int:
        """The prompt tokens of `request.inputs` on its model, as a generation would report them. Free, as
        Anthropic's count is: no budget, no metering, no tokens charged. The input guard still applies (it gives
        the model the same text a generation would, and bounds what a free call may send a worker), and the
        request rate limit too: a count takes a slot on an instance, and may cold-start one."""
        spec = self.resolve(call, request.model)
        async with call.within_deadline(GATEWAY_STEPS):
            inputs = (await self.parts.input_guard(call.principal, spec)).check(request.inputs)
            try:
                call.rate_status = await self.parts.limiter.admit(call.principal, spec)
            except RateLimited as limited:
                self.parts.metrics.rate_limited(spec.id, limited.limit)
                raise
        deadline = request.deadline if request.deadline is not None else call.deadline
        counted = dataclasses.replace(request, model=spec.id, inputs=inputs, deadline=deadline)
        return await self.parts.service.count_tokens(
            counted, lambda phases: self.parts.metrics.observe_cold_start(spec.id, phases)
        )

    def _embedding_ended(
        self, call: Call, spec: ModelSpec, progress: Progress, status: int, code: int | None
    ) -> None:
        """Embeddings that ended without their vectors are metered with the tokens the worker read (final once
        the service returned or raised; 0 when the request never reached a worker)."""
        usage, cost = processed_by([(spec, progress)])
        self._record(
            call, usage_record(call, spec, usage, status, code, "BYPASS", False, 0.0, charged(call, cost))
        )
        self._consume(call, spec, usage)

    async def check_input(self, call: Call, spec: ModelSpec, fields: Sequence[tuple[str, str]]) -> None:
        """Named texts through the model's and account's input guard ahead of the call that will use them (AI
        Search checks the client's question before it retrieves); a refusal is metered as a refused call's."""
        guard = await self.parts.input_guard(call.principal, spec)
        try:
            guard.check_texts(fields)
        except CirrusError as refused:
            self._refused(call, spec, refused)
            raise

    async def _guarded_texts(self, call: Call, spec: ModelSpec, inputs: EmbeddingInput) -> tuple[str, ...]:
        """Each text through the model's and account's input guard, as a prompt is; a refusal names the text as
        the client's protocol does (`input[1]`, `text[1]`)."""
        guard = await self.parts.input_guard(call.principal, spec)
        named = [(f"{inputs.field}[{i}]", text) for i, text in enumerate(inputs.texts)]
        checked = tuple(guard.check_texts(named))
        call.prompt = list(checked)
        return checked

    def _estimate(self, chain: list[ModelSpec], inputs: GenerationInput) -> Estimate:
        """The most the request may cost on any model of its chain (a fallback may cost more)."""
        chars = prompt_chars(inputs)
        estimates = [self.estimator.generation(model, inputs, chars) for model in chain]
        return max(estimates, key=lambda estimate: estimate.cost_usd)

    def _left_s(self, call: Call) -> float:
        left = call.remaining_s()
        return self.parts.settings.request_timeout_s if left is None else left

    async def _admit_and_look_up(
        self, call: Call, spec: ModelSpec, estimate: Estimate, key: str | None
    ) -> CachedAnswer | None:
        """Limits, budget and the cache lookup are independent round trips (to Redis, when shared): overlap them,
        and wait for both, so a failed lookup never leaves a reservation behind."""
        admitted, cached = await asyncio.gather(
            self._admit(call, spec, estimate), self._cached(key), return_exceptions=True
        )
        for outcome in (admitted, cached):
            if isinstance(outcome, BaseException):
                raise outcome
        return cached if isinstance(cached, CachedAnswer) else None

    async def _admit(self, call: Call, spec: ModelSpec, estimate: Estimate) -> None:
        """The budget first: a request it refuses must not use up a rate-limit slot. Its reservation is kept on
        the call at once, so whatever ends the call lets it go."""
        call.reservation = await self._reserve(call, estimate)
        status = await self.parts.limiter.admit(call.principal, spec)
        call.rate_status = status

    async def _reserve(self, call: Call, estimate: Estimate) -> Reservation:
        """The open node (local development) has no budget; a token's account always exists."""
        principal = call.principal
        if principal.token_id is None:
            return nothing_reserved()
        account = await self.parts.account(principal.account_id)
        if account is None:
            return nothing_reserved()
        return await self.parts.budgets.admit(principal, account.plan, account.daily_free_neurons, estimate)

    async def _cached(self, key: str | None) -> CachedAnswer | None:
        return None if key is None else await self.parts.cache.lookup_key(key)

    async def _live(
        self,
        call: Call,
        chain: list[ModelSpec],
        request: InferenceRequest,
        retry: RetryPolicy,
        cache_entry: tuple[str, float] | None,
    ) -> Answer:
        leading = cache_entry is not None and self.inflight.lead(cache_entry[0])
        tried: list[tuple[ModelSpec, Progress]] = []

        def start(spec: ModelSpec) -> Awaitable[StartedGeneration]:
            tried.append((spec, Progress()))
            return self.parts.service.start(dataclasses.replace(request, model=spec.id), tried[-1][1])

        try:
            answered = await first_to_answer(chain, retry, start, deadline=request.deadline)
        except BaseException as error:
            if leading and cache_entry is not None:
                self.inflight.abandon(cache_entry[0])
            if tried and isinstance(error, CirrusError):
                self._start_failed(call, tried, error.status, error.code)
            elif tried and isinstance(error, asyncio.CancelledError):
                self._start_failed(call, tried, 499, None)
            raise
        # A fallback's answer is not stored under the requested model's key: a token of the same account that
        # may not use the fallback would be served it.
        shares = leading and answered.step == 0
        if leading and not shares and cache_entry is not None:
            self.inflight.abandon(cache_entry[0])
        try:
            earlier = tried[
                :-1
            ]  # attempts that failed to start may have read the prompt: billed with the answer
            return self._answer(
                call, chain[answered.step], answered, cache_entry if shares else None, earlier
            )
        except BaseException:
            await answered.value.aclose()
            if shares and cache_entry is not None:
                self.inflight.abandon(cache_entry[0])
            raise

    def _answer(
        self,
        call: Call,
        model: ModelSpec,
        answered: Answered[StartedGeneration],
        cache_entry: tuple[str, float] | None,
        earlier: list[tuple[ModelSpec, Progress]],
    ) -> Answer:
        """The answer of a started generation; `cache_entry` when it is to be stored and shared."""
        generation = answered.value
        call.step = answered.step
        call.node_id = generation.node_id
        if generation.cold_start:
            phases = generation.cold_start_phases()
            self.parts.metrics.observe_cold_start(model.id, phases, generation.node_id)
        events = filtered(generation, self.parts.output_filter(model))

        def on_end(finished: Finished | None, error: CirrusError | None, text: str) -> None:
            call.answer = text
            if cache_entry is not None:
                self._settle_cache(call, model, cache_entry, finished, text)

        def bill(usage: Usage, finished: Finished | None, error: CirrusError | None, text: str) -> None:
            before = processed_by(earlier)
            self._ended(
                call, model, generation, usage, before, finished, error, answered.step, answered.attempts
            )

        ending = Ending(on_end, bill)
        call.billed_later = True  # if it ends early: see `_close_then_bill`
        return Answer(
            observed(events, call.mark_first_token, ending.ended),
            lambda: self._close_then_bill(call, generation, ending),
            generation.cold_start,
            generation.queue_s,
            generation.processed_usage,
        )

    def _start_failed(
        self, call: Call, tried: list[tuple[ModelSpec, Progress]], status: int, code: int | None
    ) -> None:
        """No answer started, but the workers may have read the prompt (a time limit before the first token,
        a crash mid-prompt, a client that left): meter what they processed, on the last model tried."""
        usage, cost = processed_by(tried)
        spec = tried[-1][0]
        record = usage_record(
            call, spec, usage, status, code, "BYPASS", False, 0.0, charged(call, cost), attempts=len(tried)
        )
        self._record(call, record)
        self._consume(call, spec, usage)

    async def _close_then_bill(self, call: Call, generation: StartedGeneration, ending: Ending) -> None:
        """In a task of its own: a client that left cancels whoever awaits the close (a streaming response is
        cancelled again at every await), and the usage must still be metered once the worker stopped. The close
        waits at most `service.SETTLE_WAIT_S` for a worker's confirmation, so a hung worker delays nothing more.
        An answer that finished was billed already, and its close (shielded itself) is all that is left."""
        if ending.billed:
            await generation.aclose()
            return
        await asyncio.shield(self._spawn(self._closed(call, generation, ending)))

    async def _closed(self, call: Call, generation: StartedGeneration, ending: Ending) -> None:
        try:
            await generation.aclose()
        finally:
            ending.closed(lambda: processed(call, generation))

    def _replayed(self, call: Call, spec: ModelSpec, cached: CachedAnswer) -> Answer:
        call.release_reservation()  # an answer from the cache costs nothing

        def on_end(finished: Finished | None, error: CirrusError | None, text: str) -> None:
            usage = cached.usage
            self._record(call, usage_record(call, spec, usage, 200, None, "HIT", False, 0.0, (0.0, 0.0)))
            call.answer = text

        async def nothing() -> None:
            return None

        replayed = observed(replay(cached), call.mark_first_token, on_end)
        return Answer(replayed, nothing, _usage=lambda: cached.usage)

    def _ended(
        self,
        call: Call,
        spec: ModelSpec,
        generation: StartedGeneration,
        usage: Usage,
        before: tuple[Usage, tuple[float, float]],
        finished: Finished | None,
        error: CirrusError | None,
        step: int,
        attempts: int,
    ) -> None:
        """Meter an answer, finished or not: an early end (499 the client left, 408 the time limit, 502 a crash)
        with the tokens the worker processed and generated, which count against limits and budgets too; plus
        `before`, what earlier attempts that failed to start processed, at their own models' prices."""
        status, code = (200, None) if error is None else (error.status, error.code)
        if finished is None and error is None:
            status = 499  # the client left before the answer ended
        own = price(spec, usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens)
        earlier_usage, earlier_cost = before
        usage = added(usage, earlier_usage)
        cost = (own[0] + earlier_cost[0], own[1] + earlier_cost[1])
        cache_status: CacheStatus = "BYPASS" if call.cache_status == "BYPASS" else "MISS"
        queue_s = generation.queue_s
        cold = generation.cold_start
        record = usage_record(
            call, spec, usage, status, code, cache_status, cold, queue_s, charged(call, cost), step, attempts
        )
        self._record(call, record)
        self._consume(call, spec, usage)

    def _consume(self, call: Call, spec: ModelSpec, usage: Usage) -> None:
        """The tokens count against the caller's tokens-per-minute limit, unless the platform stopped the work."""
        if not call.waived:
            self._spawn(self.parts.limiter.consume_tokens(call.principal, spec, usage.total_tokens))

    def _settle_cache(
        self, call: Call, spec: ModelSpec, entry: tuple[str, float], finished: Finished | None, text: str
    ) -> None:
        key, ttl_s = entry
        if finished is None or finished.finish_reason not in CACHEABLE_FINISH_REASONS:
            self.inflight.abandon(key)
            return
        answer = CachedAnswer.of(text, finished, spec.id)

        async def store_then_share() -> None:
            # Stored before the followers are let go, so a request arriving in between finds it in the store.
            try:
                await self.parts.cache.store_key(key, call.principal.account_id, answer, ttl_s)
            finally:
                self.inflight.resolve(key, answer)

        self._spawn(store_then_share())

    def _refused(self, call: Call, spec: ModelSpec, error: CirrusError) -> None:
        if isinstance(error, RateLimited):
            self.parts.metrics.rate_limited(spec.id, error.limit)
        elif isinstance(error, DailyAllocationExhausted | SpendLimitReached):
            self.parts.metrics.budget_refused(type(error).__name__)
        nothing = (0.0, 0.0)
        self._record(
            call,
            usage_record(call, spec, Usage(0, 0), error.status, error.code, "BYPASS", False, 0.0, nothing),
        )

    def _record(self, call: Call, record: UsageRecord) -> None:
        if call.ttft_s is not None:  # the first token of the answer (or of its replay from the cache) came
            record = dataclasses.replace(record, ttft_ms=round(call.ttft_s * 1000, 3))
        self.parts.meter.record(record)
        call.release_reservation()  # in the same step: the meter's pending usage takes over from the estimate
        call.set_record(record)

    async def drain(self, timeout_s: float = 5.0) -> None:
        """Let the work started after answers (token charges, cache stores) finish before the stores close."""
        if self._background:
            await asyncio.wait(set(self._background), timeout=timeout_s)

    def _spawn(self, work: Awaitable[None]) -> "asyncio.Task[None]":
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task


def charged(call: Call, cost: tuple[float, float]) -> tuple[float, float]:
    """What the caller pays for work that ended early: nothing where the platform stopped it (`Call.waived`)."""
    return (0.0, 0.0) if call.waived else cost
