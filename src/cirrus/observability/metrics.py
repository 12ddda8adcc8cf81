"""Prometheus metrics for one node, in a registry of its own so that several apps in one process never collide."""

from collections.abc import Mapping

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from cirrus.metering.record import UsageRecord
from cirrus.observability.fleet_collector import FleetCollector, FleetSource
from cirrus.observability.pool_collector import PoolCollector, PoolSource

# From a cached answer (5 ms) to a long generation on a small CPU box (2 minutes).
SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)


def phase_label(phase: str) -> str:
    """`load_s` -> `load`: the unit is in the metric's name already."""
    return phase.removesuffix("_s")


class Metrics:
    def __init__(self, pool: PoolSource | None = None, fleet: FleetSource | None = None) -> None:
        self.registry = CollectorRegistry()
        self._requests = self._counter(
            "cirrus_requests", "Requests answered", ["model", "status", "code", "route", "cache"]
        )
        self._duration = self._histogram("cirrus_request_duration_seconds", "Queue plus execution time")
        self._queue = self._histogram(
            "cirrus_queue_seconds", "Time waiting for an instance, cold start included"
        )
        self._ttft = self._histogram("cirrus_time_to_first_token_seconds", "Time to the first token")
        self._tokens = self._counter("cirrus_tokens", "Tokens processed", ["model", "kind"])
        self._neurons = self._counter("cirrus_neurons", "Neurons billed", ["model"])
        self._cache = self._counter("cirrus_cache_lookups", "Response cache lookups", ["model", "result"])
        # On a cluster gateway cold starts are counted per node too; a single node has one.
        self._node_label = ["node"] if fleet is not None else []
        self._cold_starts = self._counter(
            "cirrus_cold_starts", "Instances cold-started", ["model", *self._node_label]
        )
        self._cold_start_phases = Histogram(
            "cirrus_cold_start_seconds",
            "Cold start time by phase",
            ["model", "phase", *self._node_label],
            buckets=SECONDS_BUCKETS,
            registry=self.registry,
        )
        self._rate_limited = self._counter(
            "cirrus_rate_limited", "Requests refused by a rate limit", ["model", "limit"]
        )
        self._budget_refused = self._counter(
            "cirrus_budget_refused", "Requests refused by a budget", ["reason"]
        )
        self._breaker_open = Gauge(
            "cirrus_dependency_skipped",
            "1 while a dependency's circuit breaker is open or probing (the gateway skips it)",
            ["dependency"],
            registry=self.registry,
        )
        self._breaker_changes = self._counter(
            "cirrus_dependency_breaker_changes", "Circuit breaker state changes", ["dependency", "state"]
        )
        self._unshared_tokens = self._counter(
            "cirrus_rate_limit_unshared_tokens",
            "Tokens charged to this gateway's own limits because the shared store was skipped",
            ["model"],
        )
        self._placements = self._counter(
            "cirrus_placements",
            "Requests placed on a cluster's nodes, by placement rule",
            ["model", "rule", "node"],
        )
        if pool is not None:
            self.registry.register(PoolCollector(pool))
        if fleet is not None:
            self.registry.register(FleetCollector(fleet))

    def _counter(self, name: str, documentation: str, labels: list[str]) -> Counter:
        return Counter(name, documentation, labels, registry=self.registry)

    def _histogram(self, name: str, documentation: str) -> Histogram:
        return Histogram(name, documentation, ["model"], buckets=SECONDS_BUCKETS, registry=self.registry)

    def observe_request(self, record: UsageRecord, ttft_s: float | None) -> None:
        model = record.model
        code = "" if record.error_code is None else str(record.error_code)
        self._requests.labels(model, str(record.status), code, record.route, record.cache_status).inc()
        self._duration.labels(model).observe(record.queue_s + record.execution_s)
        self._queue.labels(model).observe(record.queue_s)
        if ttft_s is not None:
            self._ttft.labels(model).observe(ttft_s)
        self._tokens.labels(model, "prompt").inc(record.prompt_tokens)
        self._tokens.labels(model, "completion").inc(record.completion_tokens)
        self._tokens.labels(model, "cached").inc(record.cached_tokens)
        self._neurons.labels(model).inc(record.neurons)
        self._cache.labels(model, record.cache_status.lower()).inc()

    def observe_cold_start(self, model: str, phases: Mapping[str, float], node: str | None = None) -> None:
        """`node`: the cluster node that started the instance (counted only on a cluster gateway)."""
        where = [node or ""] if self._node_label else []
        self._cold_starts.labels(model, *where).inc()
        for phase, seconds in phases.items():
            self._cold_start_phases.labels(model, phase_label(phase), *where).observe(seconds)

    def placed(self, model: str, rule: str, node: str) -> None:
        """A cluster gateway sent a request to `node` by `rule` (warm, busy, cached or pull)."""
        self._placements.labels(model, rule, node).inc()

    def rate_limited(self, model: str, limit: str) -> None:
        self._rate_limited.labels(model, limit).inc()

    def budget_refused(self, reason: str) -> None:
        self._budget_refused.labels(reason).inc()

    def breaker_changed(self, dependency: str, state: str) -> None:
        """A circuit breaker's new state (closed, open, half_open), from the resilience layer."""
        self._breaker_open.labels(dependency).set(0 if state == "closed" else 1)
        self._breaker_changes.labels(dependency, state).inc()

    def rate_limit_charge_dropped(self, model: str, tokens: int) -> None:
        self._unshared_tokens.labels(model).inc(tokens)

    def render(self) -> tuple[bytes, str]:
        """The exposition body and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
