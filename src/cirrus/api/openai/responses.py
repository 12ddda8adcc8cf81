"""OpenAI's Responses API on the chat core: `POST /v1/responses`, whole or streamed with its typed events, and
stored responses (`store`, `previous_response_id`, `GET` and `DELETE /v1/responses/{id}`, and the request's
input items under `GET /v1/responses/{id}/input_items`) per account.

An answer becomes output items: a `reasoning` item (the family's thinking), a `message` with its output text, and
one `function_call` per tool call. A stream announces each item as it starts (`response.output_item.added`),
sends its deltas, and closes it when the next begins, then ends with `response.completed`, or
`response.incomplete` when `max_output_tokens` cut the answer short, as OpenAI's own server does.
"""

import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Query, Request

from cirrus.api.context import platform_of, principal_of
from cirrus.api.errors import error_body
from cirrus.api.inference import resolve_model, stream_chat, whole_chat
from cirrus.api.openai.input_items import Order, UnknownCursor, input_items, page
from cirrus.api.openai.responses_schemas import ResponsesRequest
from cirrus.api.path_parameters import add_openai_route
from cirrus.api.protocol import WireProtocol
from cirrus.api.sse import sse_data
from cirrus.auth import Permission
from cirrus.chat import ChatDelta, ChatEnd, ChatResult, ChatRun, ToolCall
from cirrus.errors import CirrusError, Forbidden, InvalidInput, NotFound
from cirrus.responses import StoredResponse, StoredResponses
from cirrus.runtime.params import Usage

router = APIRouter(tags=["OpenAI"])
log = logging.getLogger(__name__)


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def usage_body(usage: Usage, reasoning_tokens: int | None) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens or 0},
        "total_tokens": usage.total_tokens,
    }


def reasoning_item(item_id: str, text: str) -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": item_id,
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
    }


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, text: str | None, status: str = "completed") -> dict[str, Any]:
    content = [] if text is None else [text_part(text)]
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}


def call_item(
    item_id: str, call: ToolCall, arguments: str | None = None, status: str = "completed"
) -> dict[str, Any]:
    arguments = call.arguments if arguments is None else arguments
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call.id,
        "name": call.name,
        "arguments": arguments,
        "status": status,
    }


def output_items(result: ChatResult) -> list[dict[str, Any]]:
    items = [reasoning_item(new_id("rs"), result.reasoning)] if result.reasoning else []
    if result.content or not result.tool_calls:
        items.append(message_item(new_id("msg"), result.content))
    items.extend(call_item(new_id("fc"), call) for call in result.tool_calls)
    return items


class ResponseShape:
    """The response object around the output: what the request asked for, echoed as OpenAI echoes it."""

    def __init__(self, body: ResponsesRequest, model: str) -> None:
        self.id = new_id("resp")
        text_format = (
            body.text.format.model_dump(by_alias=True, exclude_none=True)
            if body.text and body.text.format
            else None
        )
        self.skeleton: dict[str, Any] = {
            "id": self.id,
            "object": "response",
            "created_at": int(time.time()),
            "status": "in_progress",
            "error": None,
            "incomplete_details": None,
            "instructions": body.instructions,
            "max_output_tokens": body.max_output_tokens,
            "model": model,
            "output": [],
            "parallel_tool_calls": body.parallel_tool_calls,
            "previous_response_id": body.previous_response_id,
            "reasoning": {"effort": body.reasoning.effort if body.reasoning else None, "summary": None},
            "store": body.store,
            "temperature": body.temperature,
            "text": {"format": text_format or {"type": "text"}},
            "tool_choice": body.tool_choice or "auto",
            "tools": [tool.model_dump(exclude_none=True) for tool in body.tools or []],
            "top_p": body.top_p,
            "truncation": "disabled",
            "usage": None,
            "user": body.user,
            "metadata": body.metadata or {},
        }

    def finished(self, output: list[dict[str, Any]], end: ChatEnd) -> dict[str, Any]:
        """The whole response; cut by max_output_tokens, it and its message are `incomplete`, as OpenAI says."""
        incomplete = end.finish_reason == "length"
        if incomplete:
            output = [
                {**item, "status": "incomplete"} if item["type"] == "message" else item for item in output
            ]
        return {
            **self.skeleton,
            "status": "incomplete" if incomplete else "completed",
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "output": output,
            "usage": usage_body(end.usage, end.reasoning_tokens),
        }


class OutputWriter:
    """The item events of a stream of deltas. One item is open at a time: reasoning and message text go on
    while their kind goes on; a tool call arrives whole, so its item opens and closes at once."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []  # closed items, as the final response lists them
        self._open: dict[str, Any] | None = None
        self._text = ""

    def delta(self, delta: ChatDelta) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if delta.reasoning:
            events += self._continue("reasoning", delta.reasoning)
        if delta.content:
            events += self._continue("message", delta.content)
        for call in (d.call for d in delta.tool_calls):
            events += self._call(call)
        return events

    def close(self) -> list[dict[str, Any]]:
        item = self._open
        if item is None:
            return []
        self._open, text, self._text = None, self._text, ""
        index = len(self.items)
        if item["type"] == "reasoning":
            done = reasoning_item(item["id"], text)
            events = [
                self._at({"type": "response.reasoning_text.done", "content_index": 0, "text": text}, item)
            ]
        else:
            done = message_item(item["id"], text)
            events = [
                self._at(
                    {"type": "response.output_text.done", "content_index": 0, "text": text, "logprobs": []},
                    item,
                ),
                self._at(
                    {"type": "response.content_part.done", "content_index": 0, "part": text_part(text)}, item
                ),
            ]
        self.items.append(done)
        return [*events, {"type": "response.output_item.done", "output_index": index, "item": done}]

    def _continue(self, kind: str, text: str) -> list[dict[str, Any]]:
        events = [] if self._open is not None and self._open["type"] == kind else self._start(kind)
        self._text += text
        assert self._open is not None
        if kind == "reasoning":
            return [
                *events,
                self._at(
                    {"type": "response.reasoning_text.delta", "content_index": 0, "delta": text}, self._open
                ),
            ]
        delta = {"type": "response.output_text.delta", "content_index": 0, "delta": text, "logprobs": []}
        return [*events, self._at(delta, self._open)]

    def _start(self, kind: str) -> list[dict[str, Any]]:
        events = self.close()
        if kind == "reasoning":
            item = {"type": "reasoning", "id": new_id("rs"), "summary": [], "content": []}
            self._open = item
            return [*events, self._added(item)]
        item = message_item(new_id("msg"), None, status="in_progress")
        self._open = item
        part = {"type": "response.content_part.added", "content_index": 0, "part": text_part("")}
        return [*events, self._added(item), self._at(part, item)]

    def _call(self, call: ToolCall) -> list[dict[str, Any]]:
        events = self.close()
        index, item_id = len(self.items), new_id("fc")
        done = call_item(item_id, call)
        self.items.append(done)
        located = {"item_id": item_id, "output_index": index}
        return [
            *events,
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": call_item(item_id, call, "", "in_progress"),
            },
            {"type": "response.function_call_arguments.delta", **located, "delta": call.arguments},
            {
                "type": "response.function_call_arguments.done",
                **located,
                "arguments": call.arguments,
                "name": call.name,
            },
            {"type": "response.output_item.done", "output_index": index, "item": done},
        ]

    def _added(self, item: dict[str, Any]) -> dict[str, Any]:
        return {"type": "response.output_item.added", "output_index": len(self.items), "item": item}

    def _at(self, event: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
        return {**event, "item_id": item["id"], "output_index": len(self.items)}


def stored_responses(request: Request) -> StoredResponses:
    return platform_of(request).gateway.responses


async def _history(request: Request, body: ResponsesRequest) -> list[dict[str, Any]]:
    if body.previous_response_id is None:
        return []
    return (await _stored(request, body.previous_response_id, "previous_response_id")).conversation


async def _store(
    request: Request,
    body: ResponsesRequest,
    history: list[dict[str, Any]],
    response: dict[str, Any],
    answer: dict[str, Any],
) -> dict[str, Any]:
    """The response as answered: a store that fails (the database is down) does not cost the client an answer
    already generated and billed; the response then says `store: false`, and the failure is logged."""
    if not body.store:
        return response
    conversation = [*history, *body.input_messages(), answer]
    account = principal_of(request).account_id
    stored = StoredResponse(response["id"], account, response, conversation, input_items(body))
    try:
        await stored_responses(request).put(stored)
    except Exception:
        log.exception("could not store response %s", response["id"])
        return {**response, "store": False}
    return response


def _answer_turn(items: list[dict[str, Any]]) -> dict[str, Any]:
    """The response's output as the assistant turn a continuation reads."""
    text = "".join(part["text"] for item in items if item["type"] == "message" for part in item["content"])
    turn: dict[str, Any] = {"role": "assistant", "content": text}
    calls = [item for item in items if item["type"] == "function_call"]
    if calls:
        turn["tool_calls"] = [
            {
                "id": c["call_id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in calls
        ]
    return turn


async def _stream(
    run: ChatRun, request: Request, body: ResponsesRequest, history: list[dict[str, Any]]
) -> AsyncIterator[bytes]:
    shape, output, sequence = ResponseShape(body, run.model), OutputWriter(), 0

    def numbered(event: dict[str, Any]) -> bytes:
        nonlocal sequence
        sequence += 1
        return sse_data({**event, "sequence_number": sequence - 1})

    yield numbered({"type": "response.created", "response": shape.skeleton})
    yield numbered({"type": "response.in_progress", "response": shape.skeleton})
    try:
        end = None
        async for event in run:
            if isinstance(event, ChatEnd):
                end = event
                break
            for data in output.delta(event):
                yield numbered(data)
        await run.aclose()  # the slot goes back before the store's write
        for data in output.close():
            yield numbered(data)
        if end is not None:
            response = shape.finished(output.items, end)
            response = await _store(request, body, history, response, _answer_turn(output.items))
            yield numbered({"type": f"response.{response['status']}", "response": response})
    except CirrusError as error:
        failure = error_body(error, WireProtocol.OPENAI)["error"]
        yield numbered(
            {
                "type": "error",
                "code": failure["code"],
                "message": failure["message"],
                "param": failure["param"],
            }
        )


async def create_response(body: ResponsesRequest, request: Request) -> Any:
    resolve_model(
        request, body.model, body.stream
    )  # scope first: a stored conversation is read only for a run
    history = await _history(request, body)
    chat = body.chat_request(history)
    if body.stream:
        return await stream_chat(request, chat, lambda run: _stream(run, request, body, history))
    run, result = await whole_chat(request, chat)
    items = output_items(result)
    end = ChatEnd(result.finish_reason, result.usage, result.reasoning_tokens, result.stop_sequence)
    response = ResponseShape(body, run.model).finished(items, end)
    return await _store(request, body, history, response, _answer_turn(items))


async def _stored(request: Request, response_id: str, param: str = "response_id") -> StoredResponse:
    """A stored response of the caller's account that the token may run: without the run permission, or for a
    model outside the token's scope, it is as absent as another account's."""
    principal = principal_of(request)
    if not principal.can(Permission.RUN):
        raise Forbidden("Authentication error: this token lacks the run permission")
    stored = await stored_responses(request).get(principal.account_id, response_id)
    if stored is None or not principal.may_use(str(stored.body.get("model", ""))):
        what = "Previous response" if param == "previous_response_id" else "Response"
        raise NotFound(f"{what} with id '{response_id}' not found.", param=param)
    return stored


async def get_response(response_id: str, request: Request) -> Any:
    return (await _stored(request, response_id)).body


async def list_input_items(
    response_id: str,
    request: Request,
    limit: int = Query(default=20, ge=1, le=100),
    order: Order = "desc",
    after: str | None = None,
    before: str | None = None,
) -> Any:
    await _stored(request, response_id)
    items = await stored_responses(request).input_items(response_id)
    try:
        return page(items, limit, order, after, before)
    except UnknownCursor as error:
        raise InvalidInput(str(error), param=error.param) from None


async def delete_response(response_id: str, request: Request) -> Any:
    await _stored(request, response_id)
    if not await stored_responses(request).delete(principal_of(request).account_id, response_id):
        raise NotFound(f"Response with id '{response_id}' not found.", param="response_id")
    return {"id": response_id, "object": "response", "deleted": True}


add_openai_route(router, "/responses", create_response, "POST", "Create a response (OpenAI Responses)")
add_openai_route(router, "/responses/{response_id}", get_response, "GET", "Get a stored response")
add_openai_route(
    router,
    "/responses/{response_id}/input_items",
    list_input_items,
    "GET",
    "List a stored response's input items",
)
add_openai_route(router, "/responses/{response_id}", delete_response, "DELETE", "Delete a stored response")
