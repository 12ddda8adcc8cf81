"""How one request asks the response cache to behave, read from AI Gateway's `cf-aig-*` headers."""

import re
from collections.abc import Mapping
from dataclasses import dataclass

from cirrus.errors import InvalidInput

TTL_HEADER = "cf-aig-cache-ttl"
SKIP_HEADER = "cf-aig-skip-cache"
KEY_HEADER = "cf-aig-cache-key"
STATUS_HEADER = "cf-aig-cache-status"

MIN_TTL_S = 60
MAX_TTL_S = 2_592_000  # one month, AI Gateway's ceiling
MAX_CUSTOM_KEY_CHARS = 1024
_DIGITS = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class CachePolicy:
    ttl_s: float
    skip: bool = False
    custom_key: str | None = None

    @property
    def enabled(self) -> bool:
        """Caching is on for this request: a TTL (the node's default or the request's own) and no skip."""
        return self.ttl_s > 0 and not self.skip

    @classmethod
    def from_headers(cls, headers: Mapping[str, str], default_ttl_s: float) -> "CachePolicy":
        lowered = {name.lower(): value for name, value in headers.items()}
        ttl = lowered.get(TTL_HEADER)
        skip = lowered.get(SKIP_HEADER)
        key = lowered.get(KEY_HEADER)
        return cls(
            ttl_s=default_ttl_s if ttl is None else _parse_ttl(ttl),
            skip=False if skip is None else _parse_skip(skip),
            custom_key=None if key is None else _parse_key(key),
        )


def _parse_ttl(value: str) -> int:
    text = value.strip()
    seconds = int(text) if _DIGITS.fullmatch(text) else None
    if seconds is None or not MIN_TTL_S <= seconds <= MAX_TTL_S:
        raise InvalidInput(
            f"{TTL_HEADER} must be a whole number of seconds from {MIN_TTL_S} to {MAX_TTL_S}, got {value!r}",
            param=TTL_HEADER,
        )
    return seconds


def _parse_skip(value: str) -> bool:
    text = value.strip().lower()
    if text not in ("true", "false"):
        raise InvalidInput(f"{SKIP_HEADER} must be true or false, got {value!r}", param=SKIP_HEADER)
    return text == "true"


def _parse_key(value: str) -> str:
    text = value.strip()
    if not text or len(text) > MAX_CUSTOM_KEY_CHARS:
        raise InvalidInput(
            f"{KEY_HEADER} must be 1 to {MAX_CUSTOM_KEY_CHARS} characters, got {len(text)}", param=KEY_HEADER
        )
    return text
