"""Structured logs: one JSON object per line, stamped with the id of the request being handled."""

import json
import logging
import sys
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, TextIO

from cirrus.metering.record import UsageRecord
from cirrus.observability.redact import redact_secrets, redact_value

REQUESTS_LOGGER = "cirrus.requests"

# Set by the request-id middleware for the duration of a request; copied into tasks the request starts.
current_request_id: ContextVar[str | None] = ContextVar("cirrus_request_id", default=None)

# Attributes every LogRecord has; anything else on a record came from `extra` and is logged as a field.
_LOG_RECORD = logging.LogRecord("", logging.INFO, "", 0, "", None, None)
_STANDARD_ATTRIBUTES = frozenset(_LOG_RECORD.__dict__) | {"message", "asctime", "taskName"}


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            record.request_id = current_request_id.get()
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in _extra_fields(record).items():
            payload.setdefault(key, value)
        if record.exc_info:
            payload["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            payload["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(payload, default=str, ensure_ascii=False)


def _extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = {k: v for k, v in record.__dict__.items() if k not in _STANDARD_ATTRIBUTES}
    if fields.get("request_id") is None:
        fields.pop("request_id", None)
    return fields


class _JsonHandler(logging.StreamHandler[TextIO]):
    """Marks the handler configure_logging installed, so calling it again replaces it instead of adding one."""


def configure_logging(level: int | str = logging.INFO, stream: TextIO | None = None) -> logging.Handler:
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _JsonHandler)]:
        root.removeHandler(handler)
    handler = _JsonHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RequestIdFilter())
    root.addHandler(handler)
    root.setLevel(level)
    return handler


def log_request(record: UsageRecord, *, prompt: object | None = None, answer: str | None = None) -> None:
    """One line per request with every field of its usage record; prompt and answer only when given."""
    fields: dict[str, Any] = record.as_dict()
    if prompt is not None:
        fields["prompt"] = redact_value(prompt)
    if answer is not None:
        fields["answer"] = redact_secrets(answer)
    logging.getLogger(REQUESTS_LOGGER).info("request", extra=fields)
