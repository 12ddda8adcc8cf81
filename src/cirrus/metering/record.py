"""What one request cost and how it went: the unit that metering stores, logs print and metrics count."""

from dataclasses import asdict, dataclass
from typing import Any, Literal

CacheStatus = Literal["HIT", "MISS", "BYPASS"]


@dataclass(frozen=True)
class UsageRecord:
    request_id: str
    account_id: str
    token_id: str | None  # the token's id, never its secret
    model: str
    status: int  # the HTTP status answered
    error_code: int | None  # the Workers AI code of the error, if any
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    queue_s: float
    cold_start: bool
    execution_s: float
    neurons: float
    cost_usd: float
    cache_status: CacheStatus
    started_at: float  # Unix time
    route: str = ""  # "workers_ai" or "openai"
    stream: bool = False
    step: int = 0  # index in the fallback chain of the model that answered
    attempts: int = 1
    # From the request's arrival to its first token, in milliseconds; None where no token came (embeddings,
    # refusals, answers that ended before their first token). A cache hit has the time its replay took.
    ttft_ms: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
