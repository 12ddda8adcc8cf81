"""Metrics for Prometheus and structured JSON logs."""

from cirrus.observability.logs import (
    REQUESTS_LOGGER,
    JsonFormatter,
    RequestIdFilter,
    configure_logging,
    current_request_id,
    log_request,
)
from cirrus.observability.metrics import Metrics
from cirrus.observability.pool_collector import PoolCollector, PoolSource
from cirrus.observability.redact import redact_secrets

__all__ = [
    "REQUESTS_LOGGER",
    "JsonFormatter",
    "Metrics",
    "PoolCollector",
    "PoolSource",
    "RequestIdFilter",
    "configure_logging",
    "current_request_id",
    "log_request",
    "redact_secrets",
]
