"""JSON from an uploaded file, where every way it can be malformed is a ValueError that says why."""

import json
from typing import Any


def parse_json(data: bytes | str) -> Any:
    """`json.loads`, except that nesting deeper than the parser's recursion limit is a ValueError too."""
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("it is nested too deeply") from None
