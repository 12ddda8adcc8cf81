"""The edge's pure parts: connection counts against their caps, the log's tally of refusals and the answers
written before the app; and, on a loopback server, a connection handed to uvicorn's WebSocket protocol."""

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from cirrus.config import Settings
from cirrus.server.edge_limits import ConnectionCounter, EdgeLimits, RefusalTally
from cirrus.server.edge_protocol import EdgeProtocol, edge_answer, edge_protocol


def test_a_client_over_its_cap_is_refused_and_others_are_not() -> None:
    counter = ConnectionCounter(EdgeLimits(max_connections=10, max_connections_per_client=2))
    assert counter.open("10.0.0.1") and counter.open("10.0.0.1")
    assert not counter.open("10.0.0.1")  # the third from one address
    assert counter.open("10.0.0.2")
    assert counter.count("10.0.0.1") == 3 and counter.count() == 4  # refused ones hold a socket too
    counter.close("10.0.0.1")
    counter.close("10.0.0.1")
    assert counter.open("10.0.0.1")  # back under its cap


def test_the_total_cap_refuses_every_client() -> None:
    counter = ConnectionCounter(EdgeLimits(max_connections=3, max_connections_per_client=0))
    assert all(counter.open(f"10.0.0.{n}") for n in range(3))
    assert not counter.open("10.0.0.9")
    counter.close("10.0.0.0")
    counter.close("10.0.0.9")
    assert counter.open("10.0.0.9")
    assert counter.count("10.0.0.0") == 0


def test_zero_means_no_cap() -> None:
    counter = ConnectionCounter(EdgeLimits(max_connections=0, max_connections_per_client=0))
    assert all(counter.open("10.0.0.1") for _ in range(5000))


def test_limits_come_from_the_settings() -> None:
    settings = Settings(
        max_header_bytes=1000, max_headers=7, header_timeout_s=1.5, max_connections_per_client=3
    )
    limits = EdgeLimits.from_settings(settings)
    assert (limits.max_header_bytes, limits.max_headers, limits.header_timeout_s) == (1000, 7, 1.5)
    assert limits.max_connections_per_client == 3


def test_an_edge_answer_is_a_whole_response_that_closes() -> None:
    answer = edge_answer(503, "Too many connections", [(b"retry-after", b"1")])
    head, body = answer.split(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 503 Service Unavailable"
    assert {b"retry-after: 1", b"connection: close", b"content-length: 20"} <= set(lines)
    assert body == b"Too many connections"


def test_each_server_counts_its_own_connections() -> None:
    first, second = edge_protocol(EdgeLimits()), edge_protocol(EdgeLimits(max_headers=5))
    assert first.counter is not second.counter
    assert second.limits.max_headers == 5


def test_a_flood_of_refusals_is_the_first_then_one_summary_per_interval() -> None:
    tally = RefusalTally()
    assert tally.refused(503)  # the first: logged in full
    assert not any([tally.refused(503) for _ in range(1000)] + [tally.refused(431)])
    assert tally.summary() == {503: 1000, 431: 1}  # one line for the interval
    assert not tally.refused(503)  # still flooding: counted for the next summary
    assert tally.summary() == {503: 1}
    assert tally.summary() == {}  # a quiet interval closes the window
    assert tally.refused(408)  # the next one is logged in full again


async def websocket_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Accepts a WebSocket and closes it at once; answers HTTP with 200."""
    if scope["type"] == "websocket":
        await receive()
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close"})
    elif scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})


@asynccontextmanager
async def loopback_server(protocol: type[EdgeProtocol]) -> AsyncIterator[int]:
    """The protocol on 127.0.0.1 with WebSockets enabled, as uvicorn's server would start it; yields the port."""
    config = uvicorn.Config(websocket_app, http=protocol, ws="websockets-sansio", log_config=None)
    config.load()
    state = ServerState()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: protocol(config=config, server_state=state, app_state={}), "127.0.0.1", 0
    )
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


async def exchange(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
    finally:
        writer.close()


async def test_a_connection_handed_to_the_websocket_protocol_frees_its_slot() -> None:
    protocol = edge_protocol(EdgeLimits(max_connections_per_client=2))
    upgrade = (
        b"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    async with loopback_server(protocol) as port:
        for _ in range(3):  # one more than the cap: a slot kept by a past upgrade would refuse it with 503
            answer = await exchange(port, upgrade)
            assert answer.startswith(b"HTTP/1.1 101 "), answer[:100]
        for _ in range(100):  # the server sees the closes soon after
            if protocol.counter.count() == 0:
                break
            await asyncio.sleep(0.02)
        assert protocol.counter.count() == 0
        assert (await exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")).startswith(b"HTTP/1.1 200 ")


async def test_refused_connections_are_logged_once_then_summarised(caplog: pytest.LogCaptureFixture) -> None:
    protocol = edge_protocol(EdgeLimits(max_connections_per_client=1, log_interval_s=0.2))
    caplog.set_level(logging.WARNING, logger="uvicorn.error")
    async with loopback_server(protocol) as port:
        _, held = await asyncio.open_connection("127.0.0.1", port)
        try:
            for _ in range(5):
                assert (await exchange(port, b"")).startswith(b"HTTP/1.1 503 ")
            await asyncio.sleep(0.5)  # one interval for the summary, and a quiet one that ends the window
        finally:
            held.close()
    lines = [record.getMessage() for record in caplog.records if record.name == "uvicorn.error"]
    assert len(lines) == 2, lines
    assert "503 Too many connections" in lines[0]
    assert lines[1].startswith("edge refused 4 more") and "503: 4" in lines[1]
