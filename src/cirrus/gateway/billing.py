"""What a call is metered with: its usage record, and the tokens its workers processed when it ended early or
took more than one attempt (each attempt at its own model's price)."""

import logging

from cirrus.catalog import ModelSpec
from cirrus.gateway.call import Call
from cirrus.metering.neurons import price
from cirrus.metering.record import CacheStatus, UsageRecord
from cirrus.runtime.params import Usage
from cirrus.runtime.progress import Progress
from cirrus.service import StartedGeneration

log = logging.getLogger(__name__)


def usage_record(
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
) -> UsageRecord:
    principal = call.principal
    return UsageRecord(
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
        route=call.route,
        stream=call.stream,
        step=step,
        attempts=attempts,
    )


def processed_by(tried: list[tuple[ModelSpec, Progress]]) -> tuple[Usage, tuple[float, float]]:
    """The tokens the attempts processed, and their cost, each at its own model's price."""
    prompt = completion = cached = 0
    usd = neurons = 0.0
    for spec, progress in tried:
        usage = progress.usage()
        prompt, completion = prompt + usage.prompt_tokens, completion + usage.completion_tokens
        cached += usage.cached_tokens
        cost = price(spec, usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens)
        usd, neurons = usd + cost[0], neurons + cost[1]
    return Usage(prompt, completion, cached), (usd, neurons)


def added(usage: Usage, more: Usage) -> Usage:
    if more.total_tokens == 0:
        return usage
    return Usage(
        usage.prompt_tokens + more.prompt_tokens,
        usage.completion_tokens + more.completion_tokens,
        usage.cached_tokens + more.cached_tokens,
        usage.reasoning_tokens + more.reasoning_tokens,
    )


def processed(call: Call, generation: StartedGeneration) -> Usage:
    """What the worker processed for a generation that ended early (valid once it is closed). Never raises, as a
    meter must not break an answer: when it cannot be told, 0 tokens are metered and that is logged."""
    try:
        return generation.processed_usage()
    except Exception:
        log.exception("could not tell what request %s processed; metering it as 0 tokens", call.request_id)
        return Usage(0, 0)
