"""When a worker's idle time goes to work that waits for it (saving ahead what the prefix cache will move out),
and how long the worker's loop may wait for frames meanwhile.

Idle work starts only after the engine has been idle for a grace period. An agent's tool loop or a client that
streams its next turn at once sends the next request within milliseconds, most often continuing the same
conversation, which then needs nothing saved; work begun just before it arrives would only delay it. People
take far longer than the grace between turns, so their next request still finds the work done. Once begun, the
work goes one piece at a time, with new frames looked at in between, and at most `MAX_PIECES` a period: work
that keeps finding more (two saves pushing each other out of a full host tier) must not keep a core busy.
"""

from collections.abc import Callable

IDLE_GRACE_S = 0.02
MAX_PIECES = 64


class IdleWork:
    def __init__(
        self, clock: Callable[[], float], grace_s: float = IDLE_GRACE_S, max_pieces: int = MAX_PIECES
    ) -> None:
        self._clock = clock
        self._grace_s = grace_s
        self._max_pieces = max_pieces
        self._idle_since: float | None = None
        self._pieces = 0  # done in this idle period

    def wait_s(self, busy: bool, work: Callable[[], bool]) -> float | None:
        """How long the loop may wait for a frame now: 0 while the engine is busy or idle work goes on, the rest
        of the grace after it fell idle, None (until a frame comes) once no work is left. `work` does one piece
        and says whether it did any."""
        if busy:
            self._idle_since, self._pieces = None, 0
            return 0.0
        now = self._clock()
        if self._idle_since is None:
            self._idle_since = now
        waited = now - self._idle_since
        if waited < self._grace_s:
            return self._grace_s - waited
        if self._pieces >= self._max_pieces or not work():
            return None
        self._pieces += 1
        return 0.0
