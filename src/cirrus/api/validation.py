"""Turn pydantic's validation errors into one clear message that names the offending parameter."""

from collections.abc import Sequence
from typing import Any

from cirrus.errors import InvalidInput


def _location(loc: Sequence[Any]) -> str:
    parts = [str(part) for part in loc if part not in ("body",)]
    return ".".join(parts)


def invalid_input(errors: Sequence[Any]) -> InvalidInput:
    if not errors:
        return InvalidInput("the request body is invalid")
    first = errors[0]
    where = _location(first.get("loc", ()))
    if first.get("type") == "json_invalid":
        return InvalidInput("the request body is not valid JSON")
    message = str(first.get("msg", "invalid value"))
    text = f"'{where}': {message}" if where else message
    more = len(errors) - 1
    if more:
        text += f" (and {more} more problem{'s' if more > 1 else ''})"
    return InvalidInput(text, param=where or None)
