"""Turn pydantic's validation errors into one clear message that names the offending parameter."""

from collections.abc import Mapping, Sequence
from typing import Any

from cirrus.errors import InvalidInput

NOT_AN_OBJECT = frozenset({"model_attributes_type", "model_type", "dict_type"})
SOURCES = frozenset({"body", "query", "path", "header"})


def _location(loc: Sequence[Any]) -> str:
    parts = list(loc[1:]) if loc and loc[0] in SOURCES else list(loc)
    return ".".join(str(part) for part in parts)


def _json_problem(error: Mapping[str, Any]) -> str:
    loc, detail = tuple(error.get("loc", ())), (error.get("ctx") or {}).get("error")
    where = f" at character {loc[1]}" if len(loc) > 1 and isinstance(loc[1], int) else ""
    return (
        f"the request body is not valid JSON: {detail}{where}"
        if detail
        else "the request body is not valid JSON"
    )


def _body_problem(error: Mapping[str, Any]) -> str | None:
    """A message for a body that is not a JSON object at all, or None if the body's shape is right."""
    kind = error.get("type")
    if kind == "json_invalid":
        return _json_problem(error)
    if tuple(error.get("loc", ())) != ("body",):
        return None
    if kind == "missing":
        return "the request body is empty: it must be a JSON object"
    if kind in NOT_AN_OBJECT:
        return "the request body must be a JSON object"
    return None


def _message(error: Mapping[str, Any]) -> str:
    kind = error.get("type")
    if kind in NOT_AN_OBJECT:
        return "must be a JSON object"
    cause = (error.get("ctx") or {}).get("error")
    if kind == "value_error" and cause is not None:  # our own validators: drop pydantic's "Value error, "
        return str(cause)
    return str(error.get("msg", "invalid value"))


def invalid_input(errors: Sequence[Any]) -> InvalidInput:
    if not errors:
        return InvalidInput("the request body is invalid")
    first = errors[0]
    problem = _body_problem(first)
    if problem is not None:
        return InvalidInput(problem)
    where = _location(first.get("loc", ()))
    message = _message(first)
    text = f"'{where}': {message}" if where else message
    more = len(errors) - 1
    if more:
        text += f" (and {more} more problem{'s' if more > 1 else ''})"
    return InvalidInput(text, param=where or None)
