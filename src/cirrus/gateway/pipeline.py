"""The gateway's per-request pipeline, in the order a request meets it:

scope check -> input guardrails -> rate limits -> budget -> response cache (and joining an identical request in
flight) -> the model, with retries and fallbacks -> output filters -> metering, token limits, cache store.

Routes translate their protocol into a `GenerationInput` and call `resolve` then `run`; everything else is here.
Embeddings take the same steps through `embed`, less the response cache, the retries and the output filters.
"""

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable

from cirrus.api.protocol import WireProtocol
from cirrus.auth import Permission
from cirrus.cache import CachedAnswer, CachePolicy, replay
from cirrus.cache.answer import CACHEABLE_FINISH_REASONS
from cirrus.catalog import ModelSpec
from cirrus.errors import CirrusError, DailyAllocationExhausted, Forbidden, ModelForbidden, RateLimited
from cirrus.gateway.answer import Answer, observed
from cirrus.gateway.attempts import RetryPolicy, first_to_answer
from cirrus.gateway.call import Call
from cirrus.gateway.components import GatewayParts
from cirrus.gateway.inflight import InFlight
from cirrus.gateway.output import filtered
from cirrus.metering.neurons import price
from cirrus.metering.record import CacheStatus, UsageRecord
from cirrus.runtime.events import Finished
from cirrus.runtime.params import Usage
from cirrus.service import EmbeddingRequest, EmbeddingResult, Generation, InferenceRequest

log = logging.getLogger(__name__)


class Pipeline:
    def __init__(self, parts: GatewayParts) -> None:
        self.parts = parts
        self.inflight: InFlight[CachedAnswer] = InFlight()
        self._background: set[asyncio.Task[None]] = set()

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
        try:
            return await self._run(call, spec, request)
        except CirrusError as error:
            self._refused(call, spec, error)
            raise

    async def _run(self, call: Call, spec: ModelSpec, request: InferenceRequest) -> Answer:
        policy = CachePolicy.from_headers(call.headers, self.parts.settings.cache_ttl_s)
        retry = RetryPolicy.from_headers(call.headers)
        inputs = (await self.parts.input_guard(call.principal, spec)).check(request.inputs)
        call.prompt = inputs.messages if inputs.messages is not None else inputs.prompt
        request = dataclasses.replace(request, inputs=inputs)
        key = self.parts.cache.key_for(call.principal.account_id, spec.id, inputs, policy)
        # Limits, budget and the cache lookup are independent round trips (to Redis, when shared): overlap them.
        _, cached = await asyncio.gather(self._admit(call, spec), self._cached(key))
        if key is None:
            call.response_headers["cf-aig-cache-status"] = "BYPASS"
            return await self._live(call, spec, request, retry, None)
        if cached is None:
            cached = await self.inflight.wait_for(key, self.parts.settings.request_timeout_s)
        if cached is not None:
            call.response_headers["cf-aig-cache-status"] = "HIT"
            return self._replayed(call, spec, cached)
        call.response_headers["cf-aig-cache-status"] = "MISS"
        return await self._live(call, spec, request, retry, (key, policy.ttl_s))

    async def embed(self, call: Call, request: EmbeddingRequest) -> EmbeddingResult:
        """`request.model` is the id `resolve` returned. Metered on the model's input price."""
        spec = self.parts.catalog.get(request.model)
        call.response_headers["cf-aig-cache-status"] = "BYPASS"
        try:
            texts = await self._guarded_texts(call, spec, request.inputs.texts)
            await self._admit(call, spec)
            inputs = dataclasses.replace(request.inputs, texts=texts)
            result = await self.parts.service.embed(dataclasses.replace(request, inputs=inputs))
        except CirrusError as error:
            self._refused(call, spec, error)
            raise
        except asyncio.CancelledError:  # the client left
            self._record(call, spec, Usage(0, 0), 499, None, "BYPASS", False, 0.0, (0.0, 0.0))
            raise
        cost = price(spec, result.usage.prompt_tokens, 0, 0)
        self._record(call, spec, result.usage, 200, None, "BYPASS", result.cold_start, result.queue_s, cost)
        self._spawn(self.parts.limiter.consume_tokens(call.principal, spec, result.usage.total_tokens))
        return result

    async def _guarded_texts(self, call: Call, spec: ModelSpec, texts: tuple[str, ...]) -> tuple[str, ...]:
        """Each text through the model's and account's input guard, as a prompt is."""
        guard = await self.parts.input_guard(call.principal, spec)
        field = "input" if call.protocol is WireProtocol.OPENAI else "text"
        checked = tuple(guard.check_texts([(f"{field}[{i}]", text) for i, text in enumerate(texts)]))
        call.prompt = list(checked)
        return checked

    async def _admit(self, call: Call, spec: ModelSpec) -> None:
        """The budget first: a request it refuses must not use up a rate-limit slot."""
        await self.parts.check_budget(call.principal)
        status = await self.parts.limiter.admit(call.principal, spec)
        call.response_headers.update(status.headers())

    async def _cached(self, key: str | None) -> CachedAnswer | None:
        return None if key is None else await self.parts.cache.lookup_key(key)

    async def _live(
        self,
        call: Call,
        spec: ModelSpec,
        request: InferenceRequest,
        retry: RetryPolicy,
        cache_entry: tuple[str, float] | None,
    ) -> Answer:
        chain = self.parts.chain(call.principal, spec)
        leading = cache_entry is not None and self.inflight.lead(cache_entry[0])
        try:
            answered = await first_to_answer(chain, retry, lambda s: self._start(request, s))
        except BaseException:
            if leading and cache_entry is not None:
                self.inflight.abandon(cache_entry[0])
            raise
        generation, model = answered.value, chain[answered.step]
        call.response_headers["cf-aig-step"] = str(answered.step)
        # A fallback's answer is not stored under the requested model's key: a token of the same account that
        # may not use the fallback would be served it.
        shares = leading and answered.step == 0
        if leading and not shares and cache_entry is not None:
            self.inflight.abandon(cache_entry[0])
        try:
            if generation.cold_start:
                phases = generation.lease.instance.status().cold_start_phases
                self.parts.metrics.observe_cold_start(model.id, phases)
            events = filtered(generation, self.parts.output_filter(model))
        except BaseException:
            await generation.aclose()
            if shares and cache_entry is not None:
                self.inflight.abandon(cache_entry[0])
            raise

        def on_end(finished: Finished | None, error: CirrusError | None, text: str) -> None:
            self._ended(call, model, generation, finished, error, text, answered.step, answered.attempts)
            if cache_entry is not None and shares:
                self._settle_cache(call, model, cache_entry, finished, text)

        return Answer(
            observed(events, call.mark_first_token, on_end),
            generation.aclose,
            generation.cold_start,
            generation.lease.queue_s,
        )

    async def _start(self, request: InferenceRequest, spec: ModelSpec) -> Generation:
        return await self.parts.service.start(dataclasses.replace(request, model=spec.id))

    def _replayed(self, call: Call, spec: ModelSpec, cached: CachedAnswer) -> Answer:
        def on_end(finished: Finished | None, error: CirrusError | None, text: str) -> None:
            usage = cached.usage
            self._record(call, spec, usage, 200, None, "HIT", cold_start=False, queue_s=0.0, cost=(0.0, 0.0))
            call.answer = text

        async def nothing() -> None:
            return None

        return Answer(observed(replay(cached), call.mark_first_token, on_end), nothing)

    def _ended(
        self,
        call: Call,
        spec: ModelSpec,
        generation: Generation,
        finished: Finished | None,
        error: CirrusError | None,
        text: str,
        step: int,
        attempts: int,
    ) -> None:
        usage = finished.usage if finished else Usage(0, 0)
        status, code = (200, None) if error is None else (error.status, error.code)
        if finished is None and error is None:
            status = 499  # the client left before the answer ended
        cost = price(spec, usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens)
        cache_status: CacheStatus = (
            "BYPASS" if call.response_headers.get("cf-aig-cache-status") == "BYPASS" else "MISS"
        )
        self._record(
            call,
            spec,
            usage,
            status,
            code,
            cache_status,
            generation.cold_start,
            generation.lease.queue_s,
            cost,
            step=step,
            attempts=attempts,
        )
        call.answer = text
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
        elif isinstance(error, DailyAllocationExhausted) or error.code == 3053:
            self.parts.metrics.budget_refused(type(error).__name__)
        self._record(call, spec, Usage(0, 0), error.status, error.code, "BYPASS", False, 0.0, (0.0, 0.0))

    def _record(
        self,
        call: Call,
        spec: ModelSpec,
        usage: Usage,
        status: int,
        code: int | None,
        cache_status: CacheStatus,
        cold_start: bool,
        queue_s: float,
        cost: tuple[float, float],
        step: int = 0,
        attempts: int = 1,
    ) -> None:
        principal = call.principal
        record = UsageRecord(
            request_id=call.request_id,
            account_id=principal.account_id,
            token_id=principal.token_id,
            model=spec.id,
            status=status,
            error_code=code,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cached_tokens=usage.cached_tokens,
            queue_s=queue_s,
            cold_start=cold_start,
            execution_s=call.elapsed_s(),
            neurons=cost[1],
            cost_usd=cost[0],
            cache_status=cache_status,
            started_at=call.started_at,
            route=call.protocol.value,
            stream=call.stream,
            step=step,
            attempts=attempts,
        )
        call.record = record
        self.parts.meter.record(record)

    async def drain(self, timeout_s: float = 5.0) -> None:
        """Let the work started after answers (token charges, cache stores) finish before the stores close."""
        if self._background:
            await asyncio.wait(set(self._background), timeout=timeout_s)

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
