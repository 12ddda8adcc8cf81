"""The streaming skeleton of a tool-call parser whose calls sit between markers in otherwise plain text.

Outside a marked region text is content; a subclass says where a region opens and how to consume it. Content
whitespace that touches a tool call (before it, between calls, after the last) is dropped, so an answer that is
only tool calls has empty content; any other whitespace is kept.
"""

from collections.abc import Iterable, Mapping
from typing import Any

from cirrus.families.markers import held_back
from cirrus.families.toolcalls import ToolCall, ToolCallDelta, ToolCallUpdate, tool_specs


class SectionParser:
    open_marker = ""

    def __init__(self, tools: Iterable[Mapping[str, Any]] | None = None) -> None:
        self.specs = tool_specs(tools)
        self._buffer = ""
        self._in_region = False
        self._region_raw = ""  # region text already consumed but not emitted, given back if the region fails
        self._held_space = ""
        self._after_call = False
        self._calls = 0
        self._malformed = False

    @property
    def malformed(self) -> bool:
        return self._malformed

    def feed(self, text: str) -> ToolCallUpdate:
        self._buffer += text
        update = ToolCallUpdate()
        while (step := self._region_step() if self._in_region else self._text_step()) is not None:
            update = update + step
        return update

    def finish(self) -> ToolCallUpdate:
        rest, self._buffer = self._buffer, ""
        if self._in_region:
            self._in_region = False
            return self.give_back(self._region_raw + rest)
        return self._content(rest, final=True)

    def consume_region(self, buffer: str) -> tuple[int, ToolCallUpdate, bool] | None:
        """Consume the start of `buffer` inside a region: (characters used, update, region ended), or None
        to wait for more text."""
        raise NotImplementedError

    def emit_call(self, call: ToolCall) -> ToolCallUpdate:
        delta = ToolCallDelta(self._calls, call)
        self._calls += 1
        self._after_call = True
        self._held_space = ""
        self._region_raw = ""
        return ToolCallUpdate(tool_calls=(delta,))

    def give_back(self, raw: str) -> ToolCallUpdate:
        """Text that looked like a tool call but is not one: content again, and the flag set."""
        self._malformed = True
        self._region_raw = ""
        self._after_call = False
        return self._content(raw)

    def _text_step(self) -> ToolCallUpdate | None:
        start = self._buffer.find(self.open_marker)
        if start >= 0:
            text = self._buffer[:start]
            self._buffer = self._buffer[start + len(self.open_marker) :]
            self._in_region = True
            self._region_raw = self.open_marker
            update = self._content(text)
            self._held_space = ""  # whitespace right before a call is dropped
            return update
        keep = held_back(self._buffer, self.open_marker)
        text = self._buffer[: len(self._buffer) - keep]
        if not text:
            return None
        self._buffer = self._buffer[len(text) :]
        return self._content(text)

    def _region_step(self) -> ToolCallUpdate | None:
        consumed = self.consume_region(self._buffer)
        if consumed is None:
            return None
        size, update, ended = consumed
        self._region_raw += self._buffer[:size] if not update.tool_calls and not update.content else ""
        self._buffer = self._buffer[size:]
        if ended:
            self._in_region = False
            self._region_raw = ""
        return update

    def _content(self, text: str, final: bool = False) -> ToolCallUpdate:
        text = self._held_space + text
        if self._after_call:
            text = text.lstrip()
        if final:
            self._held_space = ""
            return ToolCallUpdate(content=text)
        body = text.rstrip()
        self._held_space = text[len(body) :]
        if body:
            self._after_call = False
        return ToolCallUpdate(content=body)
