"""One error hierarchy. Each error knows its HTTP status, its Workers AI code and, for OpenAI, its type.

Codes below 10000 follow Workers AI's published table where one exists (5007 no such model, 3006 request too
large, 3007 timeout, 3008 aborted, 3036 daily allocation, 3040 capacity, 3041 model not allowed). Codes 3050-3059
are Cirrus's own, for conditions Workers AI never shows its callers (a worker process that crashed, a model
larger than the memory budget, a guardrail, JSON mode's unmet grammar). 10000 and 971 are the Cloudflare API's authentication and
rate-limit codes.
"""

from collections.abc import Mapping
from typing import Any, ClassVar


class CirrusError(Exception):
    status: ClassVar[int] = 500
    code: ClassVar[int] = 3000
    openai_type: ClassVar[str] = "server_error"
    openai_code: ClassVar[str | None] = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        retry_after_s: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.retry_after_s = retry_after_s
        self.headers = dict(headers or {})


class InvalidInput(CirrusError):
    status = 400
    code = 5006
    openai_type = "invalid_request_error"


class NoSuchModel(CirrusError):
    status = 400
    code = 5007
    openai_type = "invalid_request_error"
    openai_code = "model_not_found"


class ModelNotInstalled(NoSuchModel):
    """The catalog lists the model but its artifact is absent: 400 on both protocols, since the model exists."""

    openai_code = "model_not_installed"


class RequestTooLarge(CirrusError):
    status = 413
    code = 3006
    openai_type = "invalid_request_error"
    openai_code = "request_too_large"


class RequestTimeout(CirrusError):
    status = 408
    code = 3007
    openai_type = "timeout_error"
    openai_code = "timeout"


class RequestAborted(CirrusError):
    status = 408
    code = 3008
    openai_type = "timeout_error"
    openai_code = "aborted"


class CapacityExceeded(CirrusError):
    status = 429
    code = 3040
    openai_type = "rate_limit_error"
    openai_code = "capacity_exceeded"


class Unauthorized(CirrusError):
    """No token, an unknown one, a revoked or an expired one: one answer for all, so none is told apart."""

    status = 401
    code = 10000
    openai_type = "authentication_error"
    openai_code = "invalid_api_key"


class Forbidden(CirrusError):
    """A valid token acting outside its account or permissions."""

    status = 403
    code = 10000
    openai_type = "permission_error"
    openai_code = "permission_denied"


class ModelForbidden(Forbidden):
    """Checked before the model is looked up, so the answer never says whether the model exists."""

    code = 3041
    openai_code = "model_not_allowed"


class RateLimited(CirrusError):
    status = 429
    code = 971
    openai_type = "rate_limit_error"
    openai_code = "rate_limit_exceeded"

    def __init__(self, message: str, *, limit: str = "requests", **details: Any) -> None:
        super().__init__(message, **details)
        self.limit = limit  # which limit was reached: "requests" or "tokens" (per minute)


class DailyAllocationExhausted(CirrusError):
    status = 429
    code = 3036
    openai_type = "insufficient_quota"
    openai_code = "insufficient_quota"


class SpendLimitReached(CirrusError):
    status = 429
    code = 3053
    openai_type = "insufficient_quota"
    openai_code = "spend_limit_reached"


class InputRefused(CirrusError):
    """A guardrail refused the input before inference."""

    status = 400
    code = 3054
    openai_type = "invalid_request_error"
    openai_code = "content_filter"


class JsonModeFailed(CirrusError):
    """JSON mode's output could not be made valid JSON for the request (its grammar was cut off, usually by
    max_tokens). The message is Workers AI's own. 422: the request was understood, but the answer it asked for
    could not be produced within its limits; sending it again unchanged gives the same result when greedy."""

    status = 422
    code = 3055
    openai_type = "invalid_request_error"
    openai_code = "json_mode_failed"

    def __init__(self, message: str = "JSON Mode couldn't be met", **details: Any) -> None:
        super().__init__(message, param=details.pop("param", "response_format"), **details)


class WorkerCrashed(CirrusError):
    status = 502
    code = 3050
    openai_type = "server_error"
    openai_code = "worker_crashed"


class WorkerStartFailed(CirrusError):
    status = 503
    code = 3051
    openai_type = "server_error"
    openai_code = "worker_start_failed"


class ModelTooLarge(CirrusError):
    status = 503
    code = 3052
    openai_type = "server_error"
    openai_code = "model_exceeds_memory_budget"


class NotFound(CirrusError):
    status = 404
    code = 3042
    openai_type = "not_found_error"
    openai_code = "not_found"


class MethodNotAllowed(CirrusError):
    status = 405
    code = 3043
    openai_type = "invalid_request_error"
    openai_code = "method_not_allowed"


class NotReady(CirrusError):
    """The node is starting: its gateway cannot check tokens yet."""

    status = 503
    code = 3056
    openai_type = "server_error"
    openai_code = "not_ready"


class DependencyUnavailable(CirrusError):
    """A store the gateway needs (the database, Redis) is down, frozen or unreachable, and this request cannot be
    answered safely without it. Retrying later helps; the message names the dependency, never its address."""

    status = 503
    code = 3057
    openai_type = "server_error"
    openai_code = "service_unavailable"


class NoNodeAvailable(CirrusError):
    """A cluster gateway has no live node that can take the request (none offers Cirrus, or every one that could
    failed it before its first byte). Retrying later helps: nodes join and come back."""

    status = 503
    code = 3058
    openai_type = "server_error"
    openai_code = "no_node_available"


class InternalError(CirrusError):
    status = 500
    code = 3000


class ModelPullFailed(WorkerStartFailed):
    """A model pulled on first use could not be fetched from its registry (down, missing, corrupted)."""

    openai_code = "model_pull_failed"
