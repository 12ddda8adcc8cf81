"""`GET /v1/responses/{id}/input_items`: the items a stored response was asked with, as OpenAI lists them.

Each item gets the id OpenAI would give it (the client's own when it sent one), text content becomes typed
parts, and the list pages by item id with `after` / `before`, `limit` and `order` as OpenAI's list routes do.
The items are the response's own input; those of the responses it continues are listed under their own ids.
"""

import uuid
from typing import Any, Literal

from cirrus.api.openai.responses_schemas import (
    FunctionCallItem,
    FunctionCallOutputItem,
    MessageItem,
    ReasoningItem,
    ResponsesRequest,
    TextPart,
)

Order = Literal["asc", "desc"]
ID_PREFIXES = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}


def _id(kind: str, given: str | None) -> str:
    return given or f"{ID_PREFIXES[kind]}_{uuid.uuid4().hex}"


def _parts(content: str | list[TextPart], role: str) -> list[dict[str, Any]]:
    kind = "output_text" if role == "assistant" else "input_text"
    if isinstance(content, str):
        return [{"type": kind, "text": content}]
    return [{"type": kind if part.type == "text" else part.type, "text": part.text} for part in content]


def _listed(item: MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem) -> dict[str, Any]:
    if isinstance(item, MessageItem):
        content = _parts(item.content, item.role)
        return {"type": "message", "role": item.role, "content": content, "status": "completed"}
    if isinstance(item, FunctionCallItem):
        fields = {"call_id": item.call_id, "name": item.name, "arguments": item.arguments}
        return {"type": "function_call", **fields, "status": "completed"}
    if isinstance(item, FunctionCallOutputItem):
        output = item.output if isinstance(item.output, str) else "".join(p.text for p in item.output)
        return {
            "type": "function_call_output",
            "call_id": item.call_id,
            "output": output,
            "status": "completed",
        }
    return {"type": "reasoning", "summary": []}


def input_items(body: ResponsesRequest) -> list[dict[str, Any]]:
    """The request's input as a list of items with ids, in the order it was sent."""
    if isinstance(body.input, str):
        message = MessageItem(role="user", content=body.input)
        return [{"id": _id("message", None), **_listed(message)}]
    return [{"id": _id(item.type, item.id), **_listed(item)} for item in body.input]


class UnknownCursor(ValueError):
    def __init__(self, param: str, item_id: str) -> None:
        super().__init__(f"No input item with id '{item_id}' in this response.")
        self.param = param


def page(
    items: list[dict[str, Any]], limit: int, order: Order, after: str | None, before: str | None
) -> dict[str, Any]:
    """One page of `items` (in sent order) as OpenAI's list object; `UnknownCursor` for a cursor not in it."""
    ordered = items if order == "asc" else items[::-1]
    ids = [item["id"] for item in ordered]
    start = _position(ids, after, "after") + 1 if after else 0
    end = _position(ids, before, "before") if before else len(ordered)
    window = ordered[start:end]
    data = window[:limit]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": len(window) > limit,
    }


def _position(ids: list[str], item_id: str, param: str) -> int:
    try:
        return ids.index(item_id)
    except ValueError:
        raise UnknownCursor(param, item_id) from None
