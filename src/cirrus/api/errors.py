"""Render a CirrusError once, in the envelope of the protocol the caller speaks."""

import math
from collections.abc import Mapping
from typing import Any

from fastapi.responses import JSONResponse

from cirrus.api.protocol import WireProtocol
from cirrus.errors import CirrusError

# Anthropic's error types by HTTP status (docs.anthropic.com, "Errors"); anything else is its api_error.
ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    413: "request_too_large",
    422: "invalid_request_error",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
}


def error_body(error: CirrusError, protocol: WireProtocol) -> dict[str, Any]:
    if protocol is WireProtocol.ANTHROPIC:
        kind = ANTHROPIC_TYPES.get(openai_status(error), "api_error")
        return {"type": "error", "error": {"type": kind, "message": error.message}}
    if protocol is WireProtocol.OPENAI:
        return {
            "error": {
                "message": error.message,
                "type": error.openai_type,
                "code": error.openai_code,
                "param": error.param,
            }
        }
    return {
        "result": None,
        "success": False,
        "errors": [{"code": error.code, "message": error.message}],
        "messages": [],
    }


def openai_status(error: CirrusError) -> int:
    return 404 if error.openai_code == "model_not_found" else error.status


def error_response(
    error: CirrusError, protocol: WireProtocol, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    status = error.status if protocol is WireProtocol.WORKERS_AI else openai_status(error)
    all_headers = {**error.headers, **(headers or {})}
    if error.retry_after_s is not None:
        all_headers["Retry-After"] = str(max(1, math.ceil(error.retry_after_s)))
    return JSONResponse(error_body(error, protocol), status_code=status, headers=all_headers)
