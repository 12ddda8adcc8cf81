"""Whether a worker process still answers and still makes progress, judged from its heartbeats.

The server pings each loaded worker about once a second; the worker's socket-reader thread answers at once with
how many engine steps its main thread has completed. Two ways to hang, two checks:
- a stopped process (SIGSTOP, a machine paging to death) answers nothing: pings unanswered for `timeout_s`;
- a main thread stuck inside the engine leaves the reader answering, but its step count stops: requests in
  flight and no step completed for `stall_s`.
A ping still unanswered at the next check makes the worker `late`: no new request is sent to it, and its instance
does not show as ready, until it answers or is replaced.

Pure logic with the clock passed in. A check counts only after a ping had a whole interval to be answered, so an
event loop that was itself held up for a while does not condemn a healthy worker on its first check back.
"""

from collections.abc import Callable


class Liveness:
    def __init__(self, timeout_s: float, stall_s: float, clock: Callable[[], float]) -> None:
        self._timeout_s = timeout_s
        self._stall_s = stall_s
        self._clock = clock
        self._waiting_since: float | None = None  # when the oldest unanswered ping went out
        self._unanswered_checks = 0
        self._steps = -1
        self._progress_at = clock()

    @property
    def late(self) -> bool:
        """A ping went unanswered for a whole check interval."""
        return self._unanswered_checks > 0

    def pinged(self) -> None:
        if self._waiting_since is None:
            self._waiting_since = self._clock()
            self._unanswered_checks = 0

    def answered(self, steps: int) -> None:
        self._waiting_since = None
        self._unanswered_checks = 0
        if steps != self._steps:
            self._steps = steps
            self._progress_at = self._clock()

    def check(self, busy: bool) -> str | None:
        """Once per interval, before the next ping: why the worker must be replaced, or None."""
        now = self._clock()
        if not busy:
            self._progress_at = now  # nothing to do is no stall; the stall clock starts with the work
        if self._waiting_since is not None:
            self._unanswered_checks += 1
            waited = now - self._waiting_since
            if waited >= self._timeout_s and self._unanswered_checks >= 2:
                return f"answered no heartbeat for {waited:.1f}s"
        stalled = now - self._progress_at
        if busy and stalled >= self._stall_s:
            return f"completed no engine step for {stalled:.1f}s with requests in flight"
        return None
