"""The edge's pure parts: connection counts against their caps, and the answers written before the app."""

from cirrus.config import Settings
from cirrus.gateway.edge_limits import ConnectionCounter, EdgeLimits
from cirrus.gateway.edge_protocol import edge_answer, edge_protocol


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
