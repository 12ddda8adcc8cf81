"""uvicorn's httptools protocol, plus the limits at the edge (`edge_limits.py`), enforced while the head is read.

Neither uvicorn nor httptools bounds a request head: llhttp has no size limit, httptools accumulates a header
value however long it grows, `h11_max_incomplete_event_size` applies only to the slower h11 protocol, and
uvicorn's only timer (keep-alive) starts after a first response, so a connection that trickles its head, or
sends nothing, is held forever. `limit_concurrency` answers a plain 503 without Retry-After, after reading the
head, and has no notion of a client. So this subclass answers, as HTTP expects:

- 431 once the head (request line and headers) passes `max_header_bytes` (counted per read while the head is
  incomplete, so at most one read, 256 KiB, is held past it; a head that completes within a read that could have
  taken it over is measured once, as its URL and header names and values), or has more than `max_headers` headers;
- 408 when a head has not arrived whole within `header_timeout_s` of its start (or of the connection's);
- 503 with Retry-After at once to a connection over the total or per-client cap, without reading its request.

Each answer is plain text with `Connection: close`. The connection then lingers: it stops reading requests but
keeps discarding what the client still sends for `linger_s`, so a client in the middle of sending its head reads
the answer rather than a reset. While an earlier response on the connection is unfinished there is no room for an
answer (it would land inside that response), so the connection is closed instead. Idle keep-alive connections are
uvicorn's `timeout_keep_alive`. The first refusal is logged, the rest as one summary line per `log_interval_s`,
so a flood of connections is not a flood of log lines.

A connection's slot is released when it closes, or before uvicorn hands it to another protocol (a WebSocket
upgrade, whose `connection_lost` is not ours). `cirrus serve` runs with `ws="none"` (the API has no WebSocket
routes), so an upgrade request is served as plain HTTP, and uvicorn's per-request warning about it is silenced.

The fast path costs a few attribute checks per chunk and one timer per connection (armed at connect, cancelled
when the first head is complete); a later head that arrives in one chunk arms none. The subclass overrides
uvicorn's parser callbacks, which have kept their shape from 0.30 to 0.54; tests/faults/test_edge.py would
catch a change.
"""

import asyncio
import logging
from collections.abc import Callable
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from cirrus.server.edge_limits import ConnectionCounter, EdgeLimits, RefusalTally

HEAD_TOO_LARGE = 431
HEAD_TIMEOUT = 408
OVER_CAPACITY = 503
UVICORN_MALFORMED = "Invalid HTTP request received."  # what httptools_impl logs for a parser error


def edge_answer(status: int, message: str, extra: list[tuple[bytes, bytes]] | None = None) -> bytes:
    """A whole plain-text response that closes the connection."""
    body = message.encode("ascii")
    head = [STATUS_LINE[status]]
    fields = [
        *(extra or []),
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode("ascii")),
        (b"connection", b"close"),
    ]
    head.extend(name + b": " + value + b"\r\n" for name, value in fields)
    return b"".join([*head, b"\r\n", body])


class EdgeProtocol(HttpToolsProtocol):
    """One connection. `limits` and `counter` are bound per server by `edge_protocol()`."""

    limits: ClassVar[EdgeLimits]
    counter: ClassVar[ConnectionCounter]
    refusals: ClassVar[RefusalTally]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._peer = ""
        self._counted = False  # holds a slot in `counter`
        self._chunk_bytes = 0  # the read being parsed
        self._in_head = True  # between a head's first byte (or the connection's start) and its end
        self._head_bytes = 0
        self._header_count = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._refusal: tuple[int, str] | None = None  # decided while parsing, answered after the chunk
        self._answered = False
        self._edge_log = self.logger
        # uvicorn logs each malformed request itself: counted with the other refusals instead.
        self.logger = _ParserErrorsCounted(self.logger, self._malformed)  # type: ignore[assignment]

    # Connections: counted, and refused at once over a cap.
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._peer = self.client[0] if self.client else ""
        self._counted = True
        if not self.counter.open(self._peer):
            retry = str(self.limits.retry_after_s).encode("ascii")
            self._answer(OVER_CAPACITY, "Too many connections", [(b"retry-after", retry)])
            return
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._release()
        self._cancel_head_timer()
        super().connection_lost(exc)
        self.logger = self._edge_log  # the adapter refers back to this connection: free it by refcount

    def handle_websocket_upgrade(self) -> None:
        """The connection passes to uvicorn's WebSocket protocol, and its end will not reach `connection_lost`."""
        self._release()
        self._cancel_head_timer()
        super().handle_websocket_upgrade()

    def _unsupported_upgrade_warning(self) -> None:
        """Quiet: an upgrade the server does not speak is served as plain HTTP, as HTTP allows; uvicorn's warning
        (advising to install a WebSocket library) would be two log lines per request for any client."""

    def _release(self) -> None:
        if self._counted:
            self._counted = False
            self.counter.close(self._peer)

    # Reading: the head's size is counted per chunk, since httptools holds a header until it is complete.
    def data_received(self, data: bytes) -> None:
        if self._answered:  # lingering: read and drop
            return
        counting = self._in_head
        self._chunk_bytes = len(data)
        super().data_received(data)
        if counting and self._in_head and self._refusal is None:
            self._head_bytes += len(data)
            if self._head_bytes > self.limits.max_header_bytes:
                self._refusal = (HEAD_TOO_LARGE, "Request header fields too large")
        if self._refusal is not None:
            self._answer(*self._refusal)
        elif self._in_head and self._head_timer is None and not self.transport.is_closing():
            self._arm_head_timer()

    # Parser callbacks: once a refusal is decided, the rest of the request is ignored.
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._head_bytes = 0
        self._header_count = 0

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self.limits.max_headers:
            self._refusal = self._refusal or (HEAD_TOO_LARGE, "Too many request header fields")
            return
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._cancel_head_timer()
        if self._refusal is None and self._head_bytes + self._chunk_bytes > self.limits.max_header_bytes:
            self._measure_head()  # this read could have taken the head past the limit uncounted
        if self._refusal is None:
            super().on_headers_complete()

    def _measure_head(self) -> None:
        size = len(self.url) + sum(len(name) + len(value) for name, value in self.headers)
        if size > self.limits.max_header_bytes:
            self._refusal = (HEAD_TOO_LARGE, "Request header fields too large")

    def on_body(self, body: bytes) -> None:
        if self._refusal is None:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refusal is None:
            super().on_message_complete()

    # The head's deadline.
    def _arm_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(self.limits.header_timeout_s, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._answered or not self._in_head or self.transport.is_closing():
            return
        self._answer(HEAD_TIMEOUT, "Request header read timeout")

    # Answering, then lingering.
    def _answer(self, status: int, message: str, extra: list[tuple[bytes, bytes]] | None = None) -> None:
        self._answered = True
        self._cancel_head_timer()
        self._unset_keepalive_if_required()
        if self.transport.is_closing():  # uvicorn already answered (a 400 for a malformed request)
            return
        self._log_refusal(status, message)
        if self.cycle is not None and not self.cycle.response_complete:
            self.transport.close()  # a response is unfinished: an answer now would land inside it
            return
        self.transport.write(edge_answer(status, message, extra))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(self.limits.linger_s, self.transport.close)

    def _malformed(self) -> None:
        self._log_refusal(400, "Invalid HTTP request")

    def _log_refusal(self, status: int, message: str) -> None:
        if self.refusals.refused(status):
            interval = self.limits.log_interval_s
            self._edge_log.warning(
                "%s - %d %s (further edge refusals: one summary per %g s)",
                self._peer,
                status,
                message,
                interval,
            )
            self.loop.call_later(interval, _summarise, self.loop, self._edge_log, self.refusals, interval)


class _ParserErrorsCounted(logging.LoggerAdapter[logging.Logger]):
    """uvicorn's logger for one connection, less its line per malformed request (a flood of those would flood
    the log): that line is counted with the edge's refusals, everything else passes through."""

    def __init__(self, logger: logging.Logger, on_malformed: Callable[[], None]) -> None:
        super().__init__(logger, {})
        self._on_malformed = on_malformed

    @property
    def level(self) -> int:  # read by uvicorn on every connection
        return self.logger.level

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if msg == UVICORN_MALFORMED:
            self._on_malformed()
            return
        super().log(level, msg, *args, **kwargs)


def _summarise(
    loop: asyncio.AbstractEventLoop, logger: logging.Logger, refusals: RefusalTally, interval_s: float
) -> None:
    """Log the refusals held back in the last interval, and keep summarising while they go on."""
    held = refusals.summary()
    if held:
        counts = ", ".join(f"{status}: {count}" for status, count in sorted(held.items()))
        logger.warning("edge refused %d more in the last %g s (%s)", sum(held.values()), interval_s, counts)
        loop.call_later(interval_s, _summarise, loop, logger, refusals, interval_s)


def edge_protocol(limits: EdgeLimits) -> type[EdgeProtocol]:
    """A protocol class for one server (`uvicorn.Config(http=...)`): its limits and its own connection counts."""

    class BoundEdgeProtocol(EdgeProtocol):
        pass

    BoundEdgeProtocol.limits = limits
    BoundEdgeProtocol.counter = ConnectionCounter(limits)
    BoundEdgeProtocol.refusals = RefusalTally()
    return BoundEdgeProtocol
