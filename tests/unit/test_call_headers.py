"""The server turns what the pipeline decided for a call into response headers (server/call_headers.py), added by
the access log middleware to whatever response the app sends."""

from starlette.types import Message, Receive, Scope, Send

from cirrus.auth import OPEN_PRINCIPAL
from cirrus.gateway.call import Call
from cirrus.observability.metrics import Metrics
from cirrus.ratelimit import RateStatus, WindowStatus
from cirrus.server.access_log import AccessLogMiddleware
from cirrus.server.call_headers import call_headers


def call(**decided: object) -> Call:
    made = Call("req-1", OPEN_PRINCIPAL, "workers-ai", {})
    for name, value in decided.items():
        setattr(made, name, value)
    return made


def test_a_call_the_gateway_decided_nothing_for_adds_no_header() -> None:
    assert call_headers(call()) == {}


def test_each_decision_becomes_its_header() -> None:
    decided = call(
        cache_status="MISS",
        step=0,
        node_id="node-b",
        rate_status=RateStatus(requests=WindowStatus(limit=60, remaining=59, reset_s=0.25)),
    )
    assert call_headers(decided) == {
        "x-ratelimit-limit-requests": "60",
        "x-ratelimit-remaining-requests": "59",
        "x-ratelimit-reset-requests": "0.3s",
        "cf-aig-cache-status": "MISS",
        "cf-aig-step": "0",
        "x-cirrus-node": "node-b",
    }


def test_a_replayed_answer_says_hit_and_names_no_step() -> None:
    assert call_headers(call(cache_status="HIT")) == {"cf-aig-cache-status": "HIT"}


async def test_the_access_log_adds_the_call_s_headers_to_the_response_without_overriding_the_app_s() -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        scope["state"]["call"] = call(cache_status="BYPASS", step=1)
        headers = [(b"content-type", b"application/json"), (b"cf-aig-step", b"app")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"{}"})

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    scope: Scope = {"type": "http", "method": "POST", "path": "/ai/run/x", "headers": []}
    await AccessLogMiddleware(app, Metrics())(scope, receive, send)
    assert sent[0]["headers"] == [
        (b"content-type", b"application/json"),
        (b"cf-aig-step", b"app"),
        (b"cf-aig-cache-status", b"BYPASS"),
    ]
