"""A small HTTP server in a thread on 127.0.0.1, for the peers tests need (webhooks, token services, servers
that answer nonsense)."""

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[http.server.ThreadingHTTPServer]:
    """The running server (its port: `server.server_address[1]`); shut down and closed on exit."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
