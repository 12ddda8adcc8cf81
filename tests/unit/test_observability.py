"""Metrics and structured logs: values after observations, the pool gauges, JSON lines, redaction."""

import io
import json
import logging
from collections.abc import Iterator
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from starlette.types import ASGIApp, Receive, Scope, Send

from cirrus.api.metrics import router
from cirrus.auth import OPEN_PRINCIPAL, Permission, Principal
from cirrus.errors import Forbidden
from cirrus.metering.record import UsageRecord
from cirrus.observability.fleet_collector import NodeMetrics
from cirrus.observability.logs import configure_logging, current_request_id, log_request
from cirrus.observability.metrics import Metrics
from cirrus.observability.pool_collector import PoolSource
from cirrus.observability.redact import redact_secrets
from cirrus.pool.instance import InstanceStatus

MODEL = "@cf/test/small"
TOKEN = "cirrus_AbCdEf0123456789xyz_secret"

RECORD = UsageRecord(
    request_id="req-1",
    account_id="acct",
    token_id="tok-1",
    model=MODEL,
    status=200,
    error_code=None,
    prompt_tokens=12,
    completion_tokens=30,
    cached_tokens=4,
    queue_s=0.5,
    cold_start=True,
    execution_s=1.5,
    neurons=7.25,
    cost_usd=0.0001,
    cache_status="MISS",
    started_at=1_700_000_000.0,
    route="workers_ai",
)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(metrics: Metrics) -> Samples:
    body, _ = metrics.render()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float:
    return found[(name, frozenset(labels.items()))]


# -- request metrics ------------------------------------------------------------------------------------------


def test_a_request_is_counted_with_its_labels_tokens_and_neurons() -> None:
    metrics = Metrics()
    metrics.observe_request(RECORD, ttft_s=0.2)
    metrics.observe_request(replace(RECORD, status=429, error_code=3040, cache_status="HIT"), ttft_s=None)
    found = samples(metrics)
    ok = {"model": MODEL, "status": "200", "code": "", "route": "workers_ai", "cache": "MISS"}
    assert value(found, "cirrus_requests_total", **ok) == 1
    refused = {**ok, "status": "429", "code": "3040", "cache": "HIT"}
    assert value(found, "cirrus_requests_total", **refused) == 1
    assert value(found, "cirrus_tokens_total", model=MODEL, kind="prompt") == 24
    assert value(found, "cirrus_tokens_total", model=MODEL, kind="completion") == 60
    assert value(found, "cirrus_tokens_total", model=MODEL, kind="cached") == 8
    assert value(found, "cirrus_neurons_total", model=MODEL) == 14.5
    assert value(found, "cirrus_cache_lookups_total", model=MODEL, result="hit") == 1
    assert value(found, "cirrus_cache_lookups_total", model=MODEL, result="miss") == 1


def test_durations_land_in_histograms() -> None:
    metrics = Metrics()
    metrics.observe_request(RECORD, ttft_s=0.2)
    metrics.observe_request(RECORD, ttft_s=None)
    found = samples(metrics)
    assert value(found, "cirrus_request_duration_seconds_count", model=MODEL) == 2
    assert value(found, "cirrus_request_duration_seconds_sum", model=MODEL) == 4.0
    assert value(found, "cirrus_request_duration_seconds_bucket", model=MODEL, le="1.0") == 0
    assert value(found, "cirrus_request_duration_seconds_bucket", model=MODEL, le="2.5") == 2
    assert value(found, "cirrus_time_to_first_token_seconds_count", model=MODEL) == 1
    assert value(found, "cirrus_time_to_first_token_seconds_bucket", model=MODEL, le="0.005") == 0
    assert value(found, "cirrus_time_to_first_token_seconds_bucket", model=MODEL, le="120.0") == 1
    assert value(found, "cirrus_queue_seconds_sum", model=MODEL) == 1.0


def test_cold_starts_are_counted_by_phase() -> None:
    metrics = Metrics()
    metrics.observe_cold_start(MODEL, {"process_s": 0.01, "load_s": 0.3, "first_token_s": 0.05})
    found = samples(metrics)
    assert value(found, "cirrus_cold_starts_total", model=MODEL) == 1
    for phase, seconds in [("process", 0.01), ("load", 0.3), ("first_token", 0.05)]:
        assert value(found, "cirrus_cold_start_seconds_sum", model=MODEL, phase=phase) == seconds


def test_refusals_are_counted() -> None:
    metrics = Metrics()
    metrics.rate_limited(MODEL, "requests_per_minute")
    metrics.rate_limited(MODEL, "requests_per_minute")
    metrics.budget_refused("daily_free_neurons")
    found = samples(metrics)
    assert value(found, "cirrus_rate_limited_total", model=MODEL, limit="requests_per_minute") == 2
    assert value(found, "cirrus_budget_refused_total", reason="daily_free_neurons") == 1


def test_two_metrics_objects_are_independent() -> None:
    first, second = Metrics(), Metrics()
    first.observe_request(RECORD, ttft_s=None)
    assert value(samples(first), "cirrus_neurons_total", model=MODEL) == 7.25
    assert ("cirrus_neurons_total", frozenset({("model", MODEL)})) not in samples(second)


def test_render_gives_the_prometheus_content_type() -> None:
    body, content_type = Metrics().render()
    assert content_type.startswith("text/plain; version=")
    assert b"# TYPE cirrus_requests_total counter" in body


# -- pool gauges ----------------------------------------------------------------------------------------------


def status(model: str, state: str, memory: int, rss: int | None, active: int = 0) -> InstanceStatus:
    return InstanceStatus(
        id=f"inst-{model}-{state}",
        model=model,
        state=state,
        pid=None,
        memory_bytes=memory,
        rss_bytes=rss,
        active_requests=active,
        parallel=4,
        threads=2,
        pinned=False,
        started_at=0.0,
        load_s=0.0,
        first_token_s=None,
        cold_start_phases={},
        idle_since=None,
        expires_at=None,
    )


class FakePool:
    budget_bytes = 1000

    def __init__(self, statuses: list[InstanceStatus], waiting: dict[str, int]) -> None:
        self._statuses = statuses
        self._waiting = waiting

    def statuses(self) -> list[InstanceStatus]:
        return self._statuses

    def used_bytes(self) -> int:
        return sum(s.memory_bytes for s in self._statuses)

    def waiting(self, model_id: str) -> int:
        return self._waiting.get(model_id, 0)


def test_pool_gauges_are_read_at_scrape_time() -> None:
    pool = FakePool([], {})
    source = PoolSource(pool, spares_ready=lambda: 1, model_ids=lambda: ["@cf/test/other"])
    metrics = Metrics(source)
    pool._statuses = [
        status(MODEL, "ready", 300, 280, active=2),
        status(MODEL, "starting", 300, None),
        status("@cf/test/big", "ready", 400, None),
    ]
    pool._waiting = {MODEL: 3, "@cf/test/other": 1}
    found = samples(metrics)
    assert value(found, "cirrus_instances", model=MODEL, state="ready") == 1
    assert value(found, "cirrus_instances", model=MODEL, state="starting") == 1
    assert value(found, "cirrus_instance_memory_bytes", model=MODEL, kind="estimated") == 600
    assert value(found, "cirrus_instance_memory_bytes", model=MODEL, kind="rss") == 280
    assert (
        "cirrus_instance_memory_bytes",
        frozenset({("model", "@cf/test/big"), ("kind", "rss")}),
    ) not in found
    assert value(found, "cirrus_active_requests", model=MODEL) == 2
    assert value(found, "cirrus_memory_budget_bytes") == 1000
    assert value(found, "cirrus_memory_used_bytes") == 1000
    assert value(found, "cirrus_queue_depth", model=MODEL) == 3
    assert value(found, "cirrus_queue_depth", model="@cf/test/other") == 1
    assert value(found, "cirrus_queue_depth", model="@cf/test/big") == 0
    assert value(found, "cirrus_spare_workers_ready") == 1


def test_a_failing_pool_reading_leaves_the_other_metrics() -> None:
    class BrokenPool(FakePool):
        def statuses(self) -> list[InstanceStatus]:
            raise RuntimeError("boom")

    metrics = Metrics(PoolSource(BrokenPool([], {})))
    metrics.observe_request(RECORD, ttft_s=None)
    found = samples(metrics)
    assert value(found, "cirrus_neurons_total", model=MODEL) == 7.25
    assert not any(name == "cirrus_memory_budget_bytes" for name, _ in found)


# -- /metrics route -------------------------------------------------------------------------------------------


class AsPrincipal:
    def __init__(self, app: ASGIApp, principal: Principal) -> None:
        self.app = app
        self.principal = principal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope.setdefault("state", {})["principal"] = self.principal
        await self.app(scope, receive, send)


def client(required: bool, principal: Principal) -> TestClient:
    app = FastAPI()
    app.include_router(router)
    metrics = Metrics()
    metrics.budget_refused("test")
    settings = SimpleNamespace(metrics_token_required=required)
    app.state.platform = SimpleNamespace(settings=settings, metrics=metrics)
    app.add_middleware(AsPrincipal, principal=principal)
    return TestClient(app)


RUN_ONLY = Principal(account_id="a", token_id="t", token_name="n", permissions=frozenset({Permission.RUN}))


def test_metrics_route_serves_the_exposition_format() -> None:
    response = client(required=False, principal=RUN_ONLY).get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    assert 'cirrus_budget_refused_total{reason="test"} 1.0' in response.text


def test_metrics_route_requires_admin_when_configured() -> None:
    with pytest.raises(Forbidden):
        client(required=True, principal=RUN_ONLY).get("/metrics")
    assert client(required=True, principal=OPEN_PRINCIPAL).get("/metrics").status_code == 200


# -- JSON logs ------------------------------------------------------------------------------------------------


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    level = root.level
    stream = io.StringIO()
    handler = configure_logging(logging.INFO, stream)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_log_line_is_json_with_extra_fields_and_no_request_id_outside_a_request(
    log_lines: io.StringIO,
) -> None:
    logging.getLogger("cirrus.test").warning("hello %s", "world", extra={"model": MODEL})
    [line] = lines(log_lines)
    assert line["level"] == "WARNING"
    assert line["logger"] == "cirrus.test"
    assert line["message"] == "hello world"
    assert line["model"] == MODEL
    assert line["ts"].endswith("+00:00")
    assert "request_id" not in line


def test_lines_logged_while_a_request_is_handled_carry_its_id(log_lines: io.StringIO) -> None:
    token = current_request_id.set("req-42")
    try:
        logging.getLogger("cirrus.pool").info("cold start")
    finally:
        current_request_id.reset(token)
    logging.getLogger("cirrus.pool").info("after")
    first, after = lines(log_lines)
    assert first["request_id"] == "req-42"
    assert "request_id" not in after


def test_exceptions_are_logged_inside_the_json(log_lines: io.StringIO) -> None:
    try:
        raise ValueError("bad")
    except ValueError:
        logging.getLogger("cirrus.test").exception("failed")
    [line] = lines(log_lines)
    assert "ValueError: bad" in line["exc_info"]


def test_request_log_has_every_usage_field_and_no_prompt_unless_given(log_lines: io.StringIO) -> None:
    log_request(RECORD)
    [line] = lines(log_lines)
    assert line["logger"] == "cirrus.requests"
    assert {k: line[k] for k in RECORD.as_dict()} == RECORD.as_dict()
    assert "prompt" not in line
    assert "answer" not in line


def test_request_log_keeps_its_own_request_id_over_the_context(log_lines: io.StringIO) -> None:
    token = current_request_id.set("other")
    try:
        log_request(RECORD)
    finally:
        current_request_id.reset(token)
    assert lines(log_lines)[0]["request_id"] == "req-1"


def test_prompt_and_answer_are_logged_redacted_when_given(log_lines: io.StringIO) -> None:
    messages = [{"role": "user", "content": f"my key is {TOKEN}"}]
    log_request(RECORD, prompt=messages, answer="use Authorization: Bearer abc.def")
    [line] = lines(log_lines)
    assert line["prompt"] == [{"role": "user", "content": "my key is [REDACTED]"}]
    assert line["answer"] == "use Authorization: [REDACTED]"
    assert TOKEN not in json.dumps(line)


# -- redaction ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("curl -H 'Authorization: Bearer sk-abc123'", "curl -H 'Authorization: [REDACTED]'"),
        ('{"authorization": "Basic dXNlcjpwYXNz"}', '{"authorization": "[REDACTED]"}'),
        ("token=Bearer abc.def-ghi_jkl", "token=Bearer [REDACTED]"),
        ("bearer  xyz", "Bearer [REDACTED]"),
        (f"export CIRRUS_TOKEN={TOKEN}", "export CIRRUS_TOKEN=[REDACTED]"),
        ("the metric cirrus_requests_total", "the metric cirrus_requests_total"),
        ("nothing secret here", "nothing secret here"),
    ],
)
def test_redact_secrets(text: str, expected: str) -> None:
    assert redact_secrets(text) == expected


# -- a cluster gateway's node gauges ----------------------------------------------------------------------------


def test_a_cluster_gateway_labels_its_gauges_by_node_and_counts_placements() -> None:
    nodes = [
        NodeMetrics("node-a", True, 4000, 1000, [status(MODEL, "ready", 1000, None, active=2)]),
        NodeMetrics("node-b", False, 8000, 0, []),
    ]
    metrics = Metrics(fleet=lambda: nodes)
    metrics.placed(MODEL, "warm", "node-a")
    metrics.placed(MODEL, "warm", "node-a")
    metrics.placed(MODEL, "pull", "node-b")
    metrics.observe_cold_start(MODEL, {"load_s": 0.3}, "node-b")
    found = samples(metrics)
    assert value(found, "cirrus_nodes", alive="true") == 1
    assert value(found, "cirrus_nodes", alive="false") == 1
    assert value(found, "cirrus_memory_budget_bytes", node="node-b") == 8000
    assert value(found, "cirrus_memory_used_bytes", node="node-a") == 1000
    assert value(found, "cirrus_instances", node="node-a", model=MODEL, state="ready") == 1
    assert value(found, "cirrus_active_requests", node="node-a", model=MODEL) == 2
    assert value(found, "cirrus_placements_total", model=MODEL, rule="warm", node="node-a") == 2
    assert value(found, "cirrus_placements_total", model=MODEL, rule="pull", node="node-b") == 1
    assert value(found, "cirrus_cold_starts_total", model=MODEL, node="node-b") == 1
    assert value(found, "cirrus_cold_start_seconds_sum", model=MODEL, phase="load", node="node-b") == 0.3


def test_a_failing_fleet_reading_leaves_the_other_metrics() -> None:
    def broken() -> list[NodeMetrics]:
        raise RuntimeError("boom")

    metrics = Metrics(fleet=broken)
    metrics.observe_request(RECORD, ttft_s=None)
    found = samples(metrics)
    assert value(found, "cirrus_neurons_total", model=MODEL) == 7.25
    assert not any(name == "cirrus_nodes" for name, _ in found)
