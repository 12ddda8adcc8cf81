"""Where a caller stands against its limits, and the OpenAI-style x-ratelimit headers that say so."""

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class WindowStatus:
    """One limit's window: its size, what is left, and seconds until the window frees its next slot."""

    limit: int
    remaining: int
    reset_s: float

    def headers(self, kind: str) -> dict[str, str]:
        return {
            f"x-ratelimit-limit-{kind}": str(self.limit),
            f"x-ratelimit-remaining-{kind}": str(self.remaining),
            f"x-ratelimit-reset-{kind}": format_seconds(self.reset_s),
        }


@dataclass(frozen=True)
class RateStatus:
    """None for a limit means unknown (storage unreachable) or, for tokens, no limit set: no headers then."""

    requests: WindowStatus | None
    tokens: WindowStatus | None = None

    def headers(self) -> dict[str, str]:
        headers = self.requests.headers("requests") if self.requests else {}
        if self.tokens:
            headers.update(self.tokens.headers("tokens"))
        return headers


UNKNOWN_STATUS = RateStatus(requests=None)


def format_seconds(seconds: float) -> str:
    """Rounded up to a tenth ("12s", "0.5s"), so a client waiting that long is never early."""
    tenths = math.ceil(round(max(seconds, 0.0) * 10, 6))
    return f"{tenths / 10:g}s"
