"""Every line of a batch's input file checked before anything is queued: a JSON object with a `custom_id` used
by no other line, `method` POST, `url` the batch's endpoint, and a `body` that route would take (not streaming,
naming a model the batch's token may use). A bad line is one InvalidInput naming its line number and field.
Blank lines are skipped; lines count from 1, as an editor counts them."""

import json
from collections.abc import Callable
from typing import Any

from cirrus.api.openai.batch_endpoints import parsed_request
from cirrus.batches import NewItem
from cirrus.chat.finetune_ref import split_finetune
from cirrus.errors import CirrusError, Forbidden, InvalidInput, NoSuchModel

# Raises NoSuchModel or Forbidden for a model the batch may not use.
ResolveModel = Callable[[str], object]


def checked_lines(text: str, endpoint: str, max_items: int, resolve: ResolveModel) -> list[NewItem]:
    """The batch's items, in the file's order, each with its custom_id as its reference."""
    items: list[NewItem] = []
    lines_of: dict[str, int] = {}  # custom_id: its line
    for number, line in enumerate(text.split("\n"), start=1):  # not splitlines: JSON strings may hold U+2028
        if not line.strip():
            continue
        item = checked_line(number, line, endpoint, resolve)
        custom_id = str(item.external_reference)
        if custom_id in lines_of:
            raise _at(
                number,
                f"'custom_id' {custom_id!r} is used on line {lines_of[custom_id]} already",
                "custom_id",
            )
        lines_of[custom_id] = number
        items.append(item)
        if len(items) > max_items:
            raise InvalidInput(
                f"the input file has more than {max_items} requests, the most one batch holds",
                param="input_file_id",
            )
    if not items:
        raise InvalidInput(
            "the input file has no requests: send one JSON object a line", param="input_file_id"
        )
    return items


def checked_line(number: int, line: str, endpoint: str, resolve: ResolveModel) -> NewItem:
    request = _json_object(number, line)
    custom_id = request.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        raise _at(number, "'custom_id' must be a non-empty string", "custom_id")
    if request.get("method") != "POST":
        raise _at(number, f"'method' must be \"POST\", not {json.dumps(request.get('method'))}", "method")
    if request.get("url") != endpoint:
        raise _at(
            number,
            f"'url' must be the batch's endpoint {endpoint!r}, not {json.dumps(request.get('url'))}",
            "url",
        )
    body = request.get("body")
    if not isinstance(body, dict):
        raise _at(number, "'body' must be a JSON object: the request's body", "body")
    _check_body(number, endpoint, body, resolve)
    return NewItem(body, custom_id)


def _json_object(number: int, line: str) -> dict[str, Any]:
    try:
        request = json.loads(line)
    except (ValueError, RecursionError) as error:
        raise _at(number, f"not valid JSON ({error})", None) from None
    if not isinstance(request, dict):
        raise _at(number, "must be a JSON object with custom_id, method, url and body", None)
    return request


def _check_body(number: int, endpoint: str, body: dict[str, Any], resolve: ResolveModel) -> None:
    try:
        request = parsed_request(endpoint, body)
        model, _ = split_finetune(request.model, None)  # a fine-tune is looked up when the item runs
    except InvalidInput as error:
        raise _in_body(number, error) from None
    try:
        resolve(model)
    except (NoSuchModel, Forbidden) as error:
        raise _in_body(number, InvalidInput(f"'model': {error.message}", param="model")) from None


def _in_body(number: int, error: CirrusError) -> InvalidInput:
    param = f"body.{error.param}" if error.param else "body"
    return _at(number, f"in 'body', {error.message}", param)


def _at(number: int, problem: str, param: str | None) -> InvalidInput:
    return InvalidInput(f"line {number} of the input file: {problem}", param=param)
