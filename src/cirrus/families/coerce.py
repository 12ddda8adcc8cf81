"""Turn a tool argument written as text (GLM's `<arg_value>`) into the JSON value its schema asks for.

The text is JSON-decoded when it is valid JSON, else kept as a string; then it is fitted to the schema's
`type`: a string parameter keeps the text as written, numbers and booleans written as strings are converted.
A value that fits none of the types is left as decoded: checking it is the tool's business, not the parser's.
"""

import json
from collections.abc import Mapping
from typing import Any

_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


def schema_types(schema: Mapping[str, Any]) -> list[str]:
    declared = schema.get("type")
    if isinstance(declared, str):
        return [declared]
    if isinstance(declared, list):
        return [t for t in declared if isinstance(t, str)]
    return []


def decode_argument(text: str, schema: Mapping[str, Any]) -> Any:
    types = schema_types(schema)
    if types == ["string"]:
        return text
    try:
        value: Any = json.loads(text)
    except ValueError:
        value = text
    return _fit(value, text, types) if types else value


def _matches(value: Any, type_name: str) -> bool:
    if type_name in ("integer", "number") and isinstance(value, bool):
        return False
    return isinstance(value, _PYTHON_TYPES.get(type_name, ()))


def _fit(value: Any, text: str, types: list[str]) -> Any:
    if any(_matches(value, t) for t in types):
        return value
    for type_name in types:
        converted = _convert(value, text, type_name)
        if converted is not None:
            return converted
    return value


def _convert(value: Any, text: str, type_name: str) -> Any:
    if type_name == "string":
        return text
    if type_name == "integer" and isinstance(value, float) and value.is_integer():
        return int(value)
    if type_name == "boolean" and text.strip().lower() in ("true", "false"):
        return text.strip().lower() == "true"
    if type_name in ("integer", "number") and isinstance(value, str):
        return _number(value.strip(), type_name)
    return None


def _number(text: str, type_name: str) -> int | float | None:
    try:
        return int(text) if type_name == "integer" else float(text)
    except ValueError:
        return None
