"""Exception handlers: every error leaves in its protocol's envelope, never as a bare 500 or 422."""

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from cirrus.api.errors import error_response
from cirrus.api.protocol import protocol_for
from cirrus.api.validation import invalid_input
from cirrus.errors import CirrusError, InternalError, InvalidInput, MethodNotAllowed, NotFound

log = logging.getLogger(__name__)


async def _cirrus_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, CirrusError)
    return error_response(exc, protocol_for(request.url.path))


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    return error_response(invalid_input(exc.errors()), protocol_for(request.url.path))


def _http_error_as_cirrus(request: Request, exc: HTTPException) -> CirrusError:
    if exc.status_code == 404:
        return NotFound(f"no route for {request.method} {request.url.path}")
    if exc.status_code == 405:
        allowed = (exc.headers or {}).get("Allow", "")
        return MethodNotAllowed(f"{request.method} is not allowed on {request.url.path}; use {allowed}")
    cause = exc.__cause__  # FastAPI's "error parsing the body" keeps what json.loads raised
    if isinstance(cause, UnicodeDecodeError):
        return InvalidInput(f"the request body is not valid UTF-8: {cause.reason} at byte {cause.start}")
    if isinstance(cause, RecursionError):
        return InvalidInput("the request body is not valid JSON: it is nested too deeply")
    return InvalidInput(str(exc.detail))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    headers = {"Allow": exc.headers["Allow"]} if exc.headers and "Allow" in exc.headers else None
    return error_response(_http_error_as_cirrus(request, exc), protocol_for(request.url.path), headers)


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(InternalError("internal error"), protocol_for(request.url.path))


def install_handlers(app: FastAPI) -> None:
    app.add_exception_handler(CirrusError, _cirrus_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
