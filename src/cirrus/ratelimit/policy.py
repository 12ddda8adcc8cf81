"""Which limits apply to one token on one model: the token's own, else the catalog's, else Workers AI's."""

from collections.abc import Mapping
from dataclasses import dataclass

from cirrus.auth.principal import Principal
from cirrus.catalog.spec import ModelSpec

# Workers AI's published defaults per task; a task it does not list gets the text-generation figure.
TASK_REQUESTS_PER_MINUTE: Mapping[str, int] = {"text-generation": 300, "text-embeddings": 3000}
DEFAULT_REQUESTS_PER_MINUTE = 300


@dataclass(frozen=True)
class EffectiveLimits:
    requests_per_minute: int
    tokens_per_minute: int | None  # None: unlimited


def default_requests_per_minute(task: str) -> int:
    return TASK_REQUESTS_PER_MINUTE.get(task, DEFAULT_REQUESTS_PER_MINUTE)


def effective_limits(principal: Principal, spec: ModelSpec) -> EffectiveLimits:
    """Each limit is overridden on its own: a token may set requests and leave tokens to the catalog."""
    requests = _first_set(principal.requests_per_minute, spec.requests_per_minute)
    return EffectiveLimits(
        requests_per_minute=requests if requests is not None else default_requests_per_minute(spec.task),
        tokens_per_minute=_first_set(principal.tokens_per_minute, spec.tokens_per_minute),
    )


def _first_set(*values: int | None) -> int | None:
    return next((value for value in values if value is not None), None)
