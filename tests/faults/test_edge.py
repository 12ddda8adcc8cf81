"""Header attacks against a real `cirrus serve`: huge heads, too many headers, heads sent a byte at a time,
connections left idle and too many connections from one client, each answered as HTTP expects (431, 408, 503
with Retry-After, a closed connection) while a normal client keeps being served."""

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, suppress
from urllib.parse import urlsplit

import httpx
import pytest

from tests.integration.server import Server, running_server, wait_until

HEADER_TIMEOUT_S = 2.0
KEEP_ALIVE_S = 1
PER_CLIENT = 8
MARGIN_S = 3.0  # the machine is slow and shared
ATTACKER = "127.0.0.2"  # all of 127/8 is loopback: the "other client" of these tests
LIMITS = {
    "max_header_bytes": str(32 * 1024),
    "max_headers": "50",
    "header_timeout_s": str(HEADER_TIMEOUT_S),
    "keep_alive_timeout_s": str(KEEP_ALIVE_S),
    "max_connections_per_client": str(PER_CLIENT),
    "spare_workers": "0",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(tmp_path_factory.mktemp("edge"), **LIMITS) as running:
        yield running


def connect(server: Server, source: str = "127.0.0.1") -> socket.socket:
    address = urlsplit(server.url)
    sock = socket.create_connection(
        (address.hostname, address.port), timeout=HEADER_TIMEOUT_S + MARGIN_S, source_address=(source, 0)
    )
    return sock


def send_quietly(sock: socket.socket, data: bytes) -> None:
    """Send what the server lets us: it may answer and stop reading before we are done."""
    with suppress(OSError):
        sock.sendall(data)


def read_until_closed(sock: socket.socket, limit_s: float) -> bytes:
    """Everything the server sends until it closes the connection, within `limit_s`."""
    sock.settimeout(limit_s)
    chunks: list[bytes] = []
    deadline = time.monotonic() + limit_s
    try:
        while time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    except TimeoutError:
        pytest.fail(f"the connection was still open after {limit_s} s; got {b''.join(chunks)[:200]!r}")
    except ConnectionResetError:
        pass
    return b"".join(chunks)


def head(*headers: bytes) -> bytes:
    return b"GET /healthz HTTP/1.1\r\nHost: cirrus\r\n" + b"".join(headers) + b"\r\n"


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def assert_normal_service(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=5.0) as client:
        response = client.get("/v1/models")
    assert response.status_code == 200
    assert response.json()["object"] == "list"


def test_a_huge_header_is_answered_431(server: Server) -> None:
    with connect(server) as sock:
        send_quietly(sock, head(b"X-Big: " + b"a" * (10 * 1024 * 1024) + b"\r\n"))
        answer = read_until_closed(sock, MARGIN_S)
    assert status_of(answer) == 431, answer[:200]
    assert b"connection: close" in answer.lower()
    assert_normal_service(server)


def test_ten_thousand_headers_are_answered_431(server: Server) -> None:
    with connect(server) as sock:
        send_quietly(sock, head(*(b"X-H%d: v\r\n" % i for i in range(10_000))))
        answer = read_until_closed(sock, MARGIN_S)
    assert status_of(answer) == 431, answer[:200]


def test_more_headers_than_allowed_are_431_even_when_small(server: Server) -> None:
    small = head(*(b"X-%d: 1\r\n" % i for i in range(60)))  # about 600 bytes, over the count of 50
    assert len(small) < 1024
    with connect(server) as sock:
        sock.sendall(small)
        answer = read_until_closed(sock, MARGIN_S)
    assert status_of(answer) == 431, answer[:200]


def test_a_head_within_the_limits_is_served(server: Server) -> None:
    headers = [b"X-%d: 1\r\n" % i for i in range(40)] + [b"X-Large: " + b"b" * 20_000 + b"\r\n"]
    with connect(server) as sock:
        sock.sendall(head(*headers, b"Connection: close\r\n"))
        answer = read_until_closed(sock, MARGIN_S)
    assert status_of(answer) == 200, answer[:200]


def test_a_head_trickled_a_byte_at_a_time_gets_408_within_the_timeout(server: Server) -> None:
    request = head(b"X-Slow: " + b"z" * 200 + b"\r\n")
    answer: list[bytes] = []
    with connect(server) as sock:
        started = time.monotonic()
        reader = threading.Thread(target=lambda: answer.append(read_until_closed(sock, 2 * MARGIN_S)))
        reader.start()
        for byte in request:  # 0.05 s a byte: the whole head would take about 12 s
            if not reader.is_alive():
                break
            send_quietly(sock, bytes([byte]))
            time.sleep(0.05)
        reader.join(timeout=3 * MARGIN_S)
        elapsed = time.monotonic() - started
    assert answer, "the reader did not finish"
    assert status_of(answer[0]) == 408, answer[0][:200]
    assert HEADER_TIMEOUT_S - 0.5 <= elapsed <= HEADER_TIMEOUT_S + MARGIN_S


def test_a_connection_that_sends_nothing_is_closed_with_408(server: Server) -> None:
    with connect(server) as sock:
        started = time.monotonic()
        answer = read_until_closed(sock, HEADER_TIMEOUT_S + MARGIN_S)
        elapsed = time.monotonic() - started
    assert status_of(answer) == 408, answer[:200]
    assert elapsed <= HEADER_TIMEOUT_S + MARGIN_S


def test_an_idle_keep_alive_connection_is_closed(server: Server) -> None:
    with connect(server) as sock:
        sock.sendall(head())
        first = sock.recv(65536)
        assert status_of(first) == 200
        started = time.monotonic()
        rest = read_until_closed(sock, KEEP_ALIVE_S + MARGIN_S)
        elapsed = time.monotonic() - started
    assert b"HTTP/1.1" not in rest  # closed quietly: no second answer
    assert elapsed <= KEEP_ALIVE_S + MARGIN_S


def test_too_many_connections_from_one_client_are_refused_with_503(server: Server) -> None:
    with ExitStack() as held:
        for _ in range(PER_CLIENT):
            held.enter_context(connect(server, ATTACKER))
        with connect(server, ATTACKER) as extra:
            send_quietly(extra, head())
            answer = read_until_closed(extra, MARGIN_S)
        assert status_of(answer) == 503, answer[:200]
        assert b"retry-after: 1" in answer.lower()
        assert_normal_service(server)  # another client is served meanwhile

    def served_again() -> bool:
        with connect(server, ATTACKER) as sock:
            send_quietly(sock, head(b"Connection: close\r\n"))
            return status_of(read_until_closed(sock, MARGIN_S)) == 200

    assert wait_until(served_again, timeout_s=MARGIN_S)  # the client's count went down as it closed


def test_normal_requests_are_served_during_an_attack(server: Server) -> None:
    """Huge heads and trickling connections from another address, while a client's requests are answered."""
    stop = threading.Event()

    def attack() -> None:
        with ExitStack() as held:
            trickling = [held.enter_context(connect(server, ATTACKER)) for _ in range(PER_CLIENT - 1)]
            while not stop.is_set():
                for sock in trickling:
                    send_quietly(sock, b"G")
                with connect(server, ATTACKER) as big:
                    send_quietly(big, head(b"X-Big: " + b"a" * (1024 * 1024) + b"\r\n"))
                time.sleep(0.05)

    attacker = threading.Thread(target=attack)
    attacker.start()
    try:
        for _ in range(20):
            assert_normal_service(server)
    finally:
        stop.set()
        attacker.join(timeout=2 * MARGIN_S)
    assert not attacker.is_alive()


def upgrade_head(path: bytes = b"/v1/ws") -> bytes:
    return (
        b"GET " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )


def test_websocket_upgrade_requests_are_plain_http_and_free_their_connection_slot(server: Server) -> None:
    """The app has no WebSocket routes: an upgrade request is answered as HTTP (404), and each connection's slot
    is released when it closes, so a client that sent more upgrades than its cap is still served."""
    client = "127.0.0.3"
    for _ in range(PER_CLIENT + 2):
        with connect(server, client) as sock:
            sock.sendall(upgrade_head())
            answer = sock.recv(65536)
        assert status_of(answer) == 404, answer[:200]

    def served() -> bool:
        with connect(server, client) as sock:
            send_quietly(sock, head(b"Connection: close\r\n"))
            return status_of(read_until_closed(sock, MARGIN_S)) == 200

    assert wait_until(served, timeout_s=MARGIN_S)


def test_a_head_over_the_limit_arriving_in_one_read_is_answered_431(server: Server) -> None:
    request = head(b"X-Big: " + b"a" * (40 * 1024) + b"\r\n")  # over 32 KiB, small enough for one read
    with connect(server) as sock:
        sock.sendall(request)
        answer = read_until_closed(sock, MARGIN_S)
    assert status_of(answer) == 431, answer[:200]


def test_a_refused_head_behind_a_pending_response_closes_instead_of_splicing_a_431(server: Server) -> None:
    """A 431 written while an earlier response on the connection is unfinished would land inside it."""
    too_many = head(*(b"X-%d: 1\r\n" % i for i in range(60)))
    with connect(server) as sock:
        sock.sendall(head() + too_many)  # pipelined: the second head is refused before the first is answered
        answer = read_until_closed(sock, MARGIN_S)
    assert b" 431 " not in answer, answer[:300]
    assert answer == b"" or status_of(answer) == 200, answer[:300]


def test_refused_connections_do_not_flood_the_log(server: Server) -> None:
    client, refused = "127.0.0.4", 20
    logged_before = server.log().count("Too many connections")
    with ExitStack() as held:
        for _ in range(PER_CLIENT):
            held.enter_context(connect(server, client))
        for _ in range(refused):
            with connect(server, client) as extra:
                assert status_of(read_until_closed(extra, MARGIN_S)) == 503
    assert server.log().count("Too many connections") - logged_before <= 2  # the first, then a summary


def test_malformed_requests_do_not_flood_the_log(server: Server) -> None:
    uvicorn_lines = server.log().count("Invalid HTTP request received.")
    ours = server.log().count("Invalid HTTP request ")
    for _ in range(20):
        with connect(server) as sock:
            send_quietly(sock, b"GGG /\x00 nonsense\r\n\r\n")
            assert status_of(read_until_closed(sock, MARGIN_S)) == 400
    assert server.log().count("Invalid HTTP request received.") == uvicorn_lines
    assert server.log().count("Invalid HTTP request ") - ours <= 1  # the first, then a summary of the rest
    assert_normal_service(server)
