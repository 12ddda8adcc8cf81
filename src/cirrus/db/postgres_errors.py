"""What a PostgreSQL error says about the server: gone, alive but unable to serve this call, or the caller's.

psycopg files all of these under `OperationalError`, which is why class alone cannot decide: a deadlock, our own
`statement_timeout` and a refused connection are siblings there. The SQLSTATE decides instead; an error without
one never reached a server (the connection failed or was lost).

Why deadlocks and serialization failures are not retried here: the server rolled the whole transaction back, so
a retry would be safe, but it reports a deadlock only after `deadlock_timeout` (1 s by default), about when the
call's own statement budget runs out, and a retry that overran the call's deadline would read as a silent
server. The caller gets 503 with `Retry-After` and may retry (the meter keeps its batch and writes it again).
"""

import psycopg
from psycopg_pool import PoolTimeout

from cirrus.db.guard import Verdict

# The server is unreachable, shutting down, starting or refusing connections.
_GONE_CLASSES = ("08",)  # connection exception
_GONE = frozenset(
    {
        "57P01",  # admin_shutdown
        "57P02",  # crash_shutdown
        "57P03",  # cannot_connect_now
        "57P04",  # database_dropped
        "53300",  # too_many_connections
    }
)
# The server is alive and answered, but cannot do this call now.
_BUSY = frozenset(
    {
        "57014",  # query_canceled: past our statement_timeout
        "40001",  # serialization_failure
        "40P01",  # deadlock_detected
        "55P03",  # lock_not_available
    }
)
_BUSY_CLASSES = ("53",)  # insufficient resources (out of memory, disk full), 53300 aside


class PoolBusy(PoolTimeout):
    """Every pooled connection stayed in use for the whole wait: the call never reached the server, which may
    well be healthy (a flood of requests), so this is no outage."""


def classify(error: BaseException) -> Verdict:
    if isinstance(error, PoolBusy):
        return Verdict.NOT_REACHED
    if not isinstance(error, psycopg.Error):
        return Verdict.CALLER
    state = error.sqlstate
    if state is None:
        # Lost or refused connections, the pool unable to open one; a client-side misuse is the caller's.
        return Verdict.OUTAGE if isinstance(error, psycopg.OperationalError) else Verdict.CALLER
    if state in _GONE or state.startswith(_GONE_CLASSES):
        return Verdict.OUTAGE
    if state in _BUSY or state.startswith(_BUSY_CLASSES):
        return Verdict.BUSY
    # Any other operational failure the server reported (an I/O error, a system error): it answered, so it is
    # not gone, but this call cannot be served. A 503 for it, never the caller's 500.
    return Verdict.BUSY if isinstance(error, psycopg.OperationalError) else Verdict.CALLER
