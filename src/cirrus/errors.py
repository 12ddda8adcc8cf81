"""One error hierarchy. Each error knows its HTTP status, its Workers AI code and, for OpenAI, its type.

Codes below 10000 follow Workers AI's published table where one exists (5007 no such model, 3006 request too
large, 3007 timeout, 3008 aborted, 3040 capacity). Codes 3050-3059 are Cirrus's own, for conditions Workers AI
never shows its callers (a worker process that crashed, a model larger than the memory budget).
"""

from typing import ClassVar


class CirrusError(Exception):
    status: ClassVar[int] = 500
    code: ClassVar[int] = 3000
    openai_type: ClassVar[str] = "server_error"
    openai_code: ClassVar[str | None] = None

    def __init__(self, message: str, *, param: str | None = None, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.retry_after_s = retry_after_s


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


class InternalError(CirrusError):
    status = 500
    code = 3000
