"""Render a CirrusError once, in the envelope of the protocol the caller speaks."""

import math
from collections.abc import Mapping
from typing import Any

from fastapi.responses import JSONResponse

from cirrus.api.protocol import WireProtocol
from cirrus.errors import CirrusError


def error_body(error: CirrusError, protocol: WireProtocol) -> dict[str, Any]:
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
    status = openai_status(error) if protocol is WireProtocol.OPENAI else error.status
    all_headers = {**error.headers, **(headers or {})}
    if error.retry_after_s is not None:
        all_headers["Retry-After"] = str(max(1, math.ceil(error.retry_after_s)))
    return JSONResponse(error_body(error, protocol), status_code=status, headers=all_headers)
