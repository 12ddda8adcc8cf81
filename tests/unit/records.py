"""Usage records for tests: one ordinary answered request, with whatever a test sets itself."""

import uuid
from typing import Any

from cirrus.metering.record import UsageRecord

USD_PER_NEURON = 0.011 / 1000


def usage_record(*, neurons: float = 10.0, **fields: Any) -> UsageRecord:
    """A 200 on `@cf/test/alpha` with a fresh request id; `neurons` sets the cost too, other fields as given."""
    defaults: dict[str, Any] = {
        "request_id": uuid.uuid4().hex,
        "account_id": "acct",
        "token_id": "tok",
        "model": "@cf/test/alpha",
        "status": 200,
        "error_code": None,
        "prompt_tokens": 20,
        "completion_tokens": 5,
        "cached_tokens": 0,
        "queue_s": 0.0,
        "cold_start": False,
        "execution_s": 0.1,
        "neurons": neurons,
        "cost_usd": neurons * USD_PER_NEURON,
        "cache_status": "MISS",
        "started_at": 0.0,
    }
    return UsageRecord(**{**defaults, **fields})
