"""Remove credentials from text that is about to be logged (a prompt, an answer)."""

import re
from collections.abc import Mapping

REDACTED = "[REDACTED]"

# An Authorization value, as a header line (`Authorization: Basic ...`) or a JSON/dict entry.
_AUTHORIZATION = re.compile(r"""(?i)\b((?:proxy-)?authorization["']?\s*[:=]\s*["']?)[^"'\r\n]+""")
_BEARER = re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]+")
# Cirrus API tokens. The length floor keeps identifiers such as `cirrus_requests` readable.
_API_TOKEN = re.compile(r"\bcirrus_[A-Za-z0-9_-]{16,}")


def redact_secrets(text: str) -> str:
    text = _AUTHORIZATION.sub(lambda m: m.group(1) + REDACTED, text)
    text = _BEARER.sub(f"Bearer {REDACTED}", text)
    return _API_TOKEN.sub(REDACTED, text)


def redact_value(value: object) -> object:
    """Redact every string inside a prompt as the caller passed it: text, chat messages, nested lists."""
    if isinstance(value, str):
        return redact_secrets(value)
    if isinstance(value, Mapping):
        return {str(key): redact_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(item) for item in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return redact_secrets(str(value))
