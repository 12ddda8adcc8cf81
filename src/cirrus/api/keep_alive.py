"""Parse a keep-alive: seconds as a number, or a duration such as "30s", "5m", "1h"."""

import re
from typing import Any

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
MAX_KEEP_ALIVE_S = 7 * 24 * 3600.0
FORMAT = "keep_alive is seconds or a duration such as '30s', '5m', '1h'"


def parse_keep_alive(value: float | int | str | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION.match(value)
        if match is None:
            raise ValueError(FORMAT)
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if not 0 <= seconds <= MAX_KEEP_ALIVE_S:
        raise ValueError(f"keep_alive must be between 0 and {MAX_KEEP_ALIVE_S:.0f} seconds")
    return seconds


def check_keep_alive(value: Any) -> Any:
    """A pydantic before-validator: one clear error for any keep_alive that is not seconds or a duration."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float | str)):
        raise ValueError(FORMAT)
    parse_keep_alive(value)
    return value
