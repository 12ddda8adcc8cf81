"""The limits the HTTP server enforces on connections and request heads, before the app sees a request.

They live below ASGI because by the time a request reaches the app its head has been read whole and held: a
10 MB header, 10,000 headers or a head sent a byte a minute would already have cost their memory and their
connection. `edge_protocol.py` applies them while it reads; this module holds the numbers and the connection
counts, which are plain logic.
"""

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from cirrus.config import Settings


@dataclass(frozen=True)
class EdgeLimits:
    """0 for a connection cap means no cap."""

    max_header_bytes: int = 64 * 1024
    max_headers: int = 100
    header_timeout_s: float = 10.0
    max_connections: int = 1024
    max_connections_per_client: int = 64
    retry_after_s: int = 1
    linger_s: float = 2.0
    log_interval_s: float = 10.0  # refusals past the first are logged as one summary line per interval

    @classmethod
    def from_settings(cls, settings: Settings) -> "EdgeLimits":
        return cls(
            max_header_bytes=settings.max_header_bytes,
            max_headers=settings.max_headers,
            header_timeout_s=settings.header_timeout_s,
            max_connections=settings.max_connections,
            max_connections_per_client=settings.max_connections_per_client,
        )


class ConnectionCounter:
    """Open connections in total and per client address. Every open connection is counted, refused ones too
    (each holds a socket until it is closed), so a client over its cap cannot push the total further."""

    def __init__(self, limits: EdgeLimits) -> None:
        self._limits = limits
        self._per_client: Counter[str] = Counter()
        self._total = 0

    def open(self, client: str) -> bool:
        """Count a new connection; False when it takes its client or the server over a cap."""
        self._total += 1
        self._per_client[client] += 1
        return self._within(self._total, self._limits.max_connections) and self._within(
            self._per_client[client], self._limits.max_connections_per_client
        )

    def close(self, client: str) -> None:
        self._total -= 1
        self._per_client[client] -= 1
        if self._per_client[client] <= 0:
            del self._per_client[client]

    def count(self, client: str | None = None) -> int:
        return self._total if client is None else self._per_client[client]

    @staticmethod
    def _within(count: int, cap: int) -> bool:
        return cap <= 0 or count <= cap


class RefusalTally:
    """Which refusals to log, so that a flood of refused connections is a few log lines, not one per connection.

    The first refusal is logged in full and opens a window; the ones after it are counted by status until the
    caller takes a summary (once per `log_interval_s`). An empty summary closes the window, and the next refusal
    is logged in full again."""

    def __init__(self) -> None:
        self._open = False
        self._held: Counter[int] = Counter()

    def refused(self, status: int) -> bool:
        """Count a refusal; True when it is the first of a window, to be logged in full."""
        if self._open:
            self._held[status] += 1
            return False
        self._open = True
        return True

    def summary(self) -> Mapping[int, int]:
        """The refusals held back since the last summary, by status; empty closes the window."""
        held, self._held = self._held, Counter()
        if not held:
            self._open = False
        return held
