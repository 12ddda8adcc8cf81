"""POST /v1/messages: Anthropic's Messages API on the chat core, whole or streamed with Anthropic's events; and
POST /v1/messages/count_tokens, the prompt's size alone, as the model's worker renders and tokenizes it.

A stream opens one content block per kind of output as it arrives (thinking, text, each tool call), closes it
when the next kind starts, and ends with the stop reason and the usage in `message_delta`. `message_start`
reports the prompt's tokens, which the worker counted when it admitted the request.

`stop_reason` is `stop_sequence` only for one of the request's own `stop_sequences`; the end of the model's turn
(its end-of-generation token or its family's end-of-turn text) is `end_turn`.
"""

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request

from cirrus.api.anthropic.schemas import CountTokensRequest, MessagesRequest, TokenCount
from cirrus.api.errors import error_body
from cirrus.api.inference import count_chat, stream_chat, whole_chat
from cirrus.api.protocol import WireProtocol
from cirrus.chat import ChatDelta, ChatEnd, ChatResult, ChatRun, ToolCall
from cirrus.errors import CirrusError
from cirrus.runtime.params import Usage

router = APIRouter(tags=["Anthropic"])
STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens"}


def message_id() -> str:
    return f"msg_{uuid.uuid4().hex[:24]}"


class StopReason:
    """Anthropic's `stop_reason` and `stop_sequence` for an answer to a request with these `stop_sequences`."""

    def __init__(self, stop_sequences: list[str] | None) -> None:
        self._asked = frozenset(stop_sequences or ())

    def fields(self, finish_reason: str, matched: str | None) -> dict[str, str | None]:
        if finish_reason == "stop" and matched is not None and matched in self._asked:
            return {"stop_reason": "stop_sequence", "stop_sequence": matched}
        return {"stop_reason": STOP_REASONS.get(finish_reason, "end_turn"), "stop_sequence": None}


def usage_body(usage: Usage) -> dict[str, int]:
    """Anthropic counts cache reads apart from `input_tokens`: the prompt is their sum."""
    return {
        "input_tokens": usage.prompt_tokens - usage.cached_tokens,
        "output_tokens": usage.completion_tokens,
        "cache_read_input_tokens": usage.cached_tokens,
        "cache_creation_input_tokens": 0,
    }


def _tool_use(call: ToolCall) -> dict[str, Any]:
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": json.loads(call.arguments)}


def content_blocks(result: ChatResult) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if result.reasoning:
        blocks.append({"type": "thinking", "thinking": result.reasoning, "signature": ""})
    if result.content or not result.tool_calls:
        blocks.append({"type": "text", "text": result.content})
    blocks.extend(_tool_use(call) for call in result.tool_calls)
    return blocks


def _message(
    model: str, content: list[dict[str, Any]], stop: dict[str, str | None], usage: Usage
) -> dict[str, Any]:
    return {
        "id": message_id(),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        **stop,
        "usage": usage_body(usage),
    }


def sse_event(data: dict[str, Any]) -> bytes:
    """Anthropic names each event on its own line, as well as in the data's `type`."""
    return f"event: {data['type']}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


class BlockWriter:
    """The content block events for a stream of deltas: a block of one kind stays open while its kind goes on."""

    def __init__(self) -> None:
        self._index = -1
        self._open: str | None = None

    def delta(self, delta: ChatDelta) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if delta.reasoning:
            events += self._continue("thinking", {"type": "thinking_delta", "thinking": delta.reasoning})
        if delta.content:
            events += self._continue("text", {"type": "text_delta", "text": delta.content})
        for call in (d.call for d in delta.tool_calls):
            events += self._start({**_tool_use(call), "input": {}})
            partial = {"type": "input_json_delta", "partial_json": call.arguments}
            events += [{"type": "content_block_delta", "index": self._index, "delta": partial}, *self.close()]
        return events

    def close(self) -> list[dict[str, Any]]:
        if self._open is None:
            return []
        self._open = None
        return [{"type": "content_block_stop", "index": self._index}]

    def _continue(self, kind: str, delta: dict[str, Any]) -> list[dict[str, Any]]:
        started = [] if self._open == kind else self._start(_empty_block(kind))
        return [*started, {"type": "content_block_delta", "index": self._index, "delta": delta}]

    def _start(self, block: dict[str, Any]) -> list[dict[str, Any]]:
        events = self.close()
        self._index += 1
        self._open = block["type"]
        return [*events, {"type": "content_block_start", "index": self._index, "content_block": block}]


def _empty_block(kind: str) -> dict[str, Any]:
    return (
        {"type": "thinking", "thinking": "", "signature": ""}
        if kind == "thinking"
        else {"type": "text", "text": ""}
    )


async def _stream(run: ChatRun, stop: StopReason) -> AsyncIterator[bytes]:
    blocks = BlockWriter()
    opened = _message(run.model, [], {"stop_reason": None, "stop_sequence": None}, run.prompt_usage())
    yield sse_event({"type": "message_start", "message": opened})
    try:
        async for event in run:
            if isinstance(event, ChatDelta):
                for data in blocks.delta(event):
                    yield sse_event(data)
                continue
            for data in [*blocks.close(), _message_delta(event, stop)]:
                yield sse_event(data)
        yield sse_event({"type": "message_stop"})
    except CirrusError as error:
        yield sse_event(error_body(error, WireProtocol.ANTHROPIC))


def _message_delta(end: ChatEnd, stop: StopReason) -> dict[str, Any]:
    delta = stop.fields(end.finish_reason, end.stop_sequence)
    return {"type": "message_delta", "delta": delta, "usage": usage_body(end.usage)}


async def create_message(body: MessagesRequest, request: Request) -> Any:
    chat, stop = body.chat_request(), StopReason(body.stop_sequences)
    if body.stream:
        return await stream_chat(request, chat, lambda run: _stream(run, stop))
    run, result = await whole_chat(request, chat)
    fields = stop.fields(result.finish_reason, result.stop_sequence)
    return _message(run.model, content_blocks(result), fields, result.usage)


async def count_tokens(body: CountTokensRequest, request: Request) -> TokenCount:
    """What a message with this body would report as its prompt: `input_tokens` plus `cache_read_input_tokens`."""
    return TokenCount(input_tokens=await count_chat(request, body.chat_request()))


router.add_api_route(
    "/v1/messages",
    create_message,
    methods=["POST"],
    summary="Create a message (Anthropic Messages)",
    responses={200: {"description": "the message, or text/event-stream when stream is true"}},
)
router.add_api_route(
    "/v1/messages/count_tokens",
    count_tokens,
    methods=["POST"],
    summary="Count a message's input tokens (Anthropic Messages)",
)
