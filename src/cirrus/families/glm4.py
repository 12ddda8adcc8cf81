"""The GLM-4 chat format (GLM-4-9B-chat alias ChatGLM4, GLM-4-0414) and its tool calls.

The format (our template: templates/glm4.jinja): `[gMASK]<sop>`, then turns `<|system|>\\n...`,
`<|user|>\\n...`, `<|assistant|>\\n...`, tool results `<|observation|>\\n...`; the prompt ends with a bare
`<|assistant|>`. Offered tools are described in a system turn: `# 可用工具`, then per tool `## NAME`, the function
as JSON indented by 4, and the line `在调用上述函数时，请使用 Json 格式表示调用的参数。`. A tool call is an assistant turn with no
marker: `<|assistant|>NAME\\n{json arguments}`; the turn ends at `<|user|>`, `<|observation|>` or the
end-of-text token.

Sources, and where they differ:
- THUDM/glm-4-9b-chat's chat template (quoted in the Berkeley function-calling leaderboard's GLM handler and
  in llama.cpp's tests/test-chat-template.cpp): reads the tools from a message's `tools` key and puts a
  ChatGLM self-introduction before `# 可用工具`; writes every turn as `<|{role}|>{metadata}\\n{content}`, the
  call's name being the `metadata`.
- GLM-4-0414's (THUDM/GLM-4-*-0414, GLM-Z1-*-0414): reads `tools`, no self-introduction (ms-swift's
  GLM4_0414AgentTemplate drops it too, `is_glm4_0414`), system turns first, results as role `observation`.
  Some 0414 templates write a space after the name (`NAME \\n`); GLM-Z1's opens `<think>` in the prompt. We
  follow 0414: no self-introduction, `NAME\\n`, no `<think>`.
- ms-swift's GLM4AgentTemplate (swift/plugin/agent_template/glm4.py): several calls are written one after
  another, each opened by `<|assistant|>` (`NAME\\n{json}<|assistant|>NAME\\n{json}<|observation|>`), each
  result its own `<|observation|>` turn; it finds calls by splitting the answer on `<|assistant|>`, a name
  line then `{...}` in each piece. GLM-4's own demo server reads one call: the first line an offered tool's
  name, the rest JSON.
- llama.cpp's src/llama-chat.cpp: CHATGLM_4 ends its prompt with `<|assistant|>\\n`, which leaves no room for a
  call (we end with the bare `<|assistant|>`, as the Hugging Face templates do); GLMEDGE writes the same turns
  without `[gMASK]<sop>`, and GLM-Edge's own template has no tools.

Parsing. The answer is read as segments: the first starts where the prompt's `<|assistant|>` left off, each
further one at an `<|assistant|>` the model writes (so several calls, and text before them, are read as
ms-swift reads them). A segment is a call when, after optional whitespace, its first line is an offered tool's
name (trailing spaces allowed) and the next line starts a JSON object that decodes; its string values are
fitted to the tool's schema where the schema wants another type (`coerce`). Anything else is content, as
written (the `<|assistant|>` that opened it included). A segment that is a name line then `{` but whose object
is not valid JSON, or never closes, is content too, and flags the parser `malformed`.

Streaming: a segment is held back while it could still be a call (a prefix of an offered name, that name and a
line break, then an object not yet closed); ordinary text is passed on as soon as it cannot be one. Whitespace
that touches a call is dropped, as `sections.SectionParser` does.
"""

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cirrus.families.coerce import decode_argument, schema_types
from cirrus.families.markers import held_back
from cirrus.families.toolcalls import (
    ToolCall,
    ToolCallDelta,
    ToolCallUpdate,
    ToolSpec,
    arguments_json,
    new_call_id,
    tool_specs,
)

TURN = "<|assistant|>"  # opens each further segment: another call, or text
_NAME_PADDING = " \t\r"
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class _Reading:
    """What the start of a segment is so far."""

    call: ToolCall | None = None  # complete: the call and the characters it used
    used: int = 0
    undecided: bool = False  # could still become a call: wait for more text
    call_shaped: bool = False  # a name line and an opening brace: failing now is a malformed call


class Glm4ToolCallParser:
    def __init__(self, tools: Iterable[Mapping[str, Any]] | None = None) -> None:
        self.specs = tool_specs(tools)
        self._buffer = ""
        self._in_segment = True  # the answer itself starts a segment
        self._opening = ""  # the `<|assistant|>` that opened the current segment, given back if it is text
        self._braces_tried = 0  # closing braces in the arguments at the last decoding attempt
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
        while (step := self._segment_step() if self._in_segment else self._text_step()) is not None:
            update = update + step
        return update

    def finish(self) -> ToolCallUpdate:
        if self._in_segment:
            self._malformed = self._malformed or self._read(self._buffer).call_shaped
            self._in_segment = False
        rest, self._buffer = self._opening + self._buffer, ""
        self._opening = ""
        return self._content(rest, final=True)

    def _segment_step(self) -> ToolCallUpdate | None:
        reading = self._read(self._buffer)
        if reading.undecided:
            return None
        self._in_segment = False
        if reading.call is None:  # text: the opening marker and the rest are content as written
            self._malformed = self._malformed or reading.call_shaped
            opening, self._opening = self._opening, ""
            return self._content(opening)
        self._buffer = self._buffer[reading.used :]
        self._opening = ""
        return self._emit(reading.call)

    def _text_step(self) -> ToolCallUpdate | None:
        start = self._buffer.find(TURN)
        if start >= 0:
            text, self._buffer = self._buffer[:start], self._buffer[start + len(TURN) :]
            update = self._content(text)
            self._in_segment, self._opening, self._braces_tried = True, TURN, 0
            return update
        keep = held_back(self._buffer, TURN)
        text = self._buffer[: len(self._buffer) - keep]
        if not text:
            return None
        self._buffer = self._buffer[len(text) :]
        return self._content(text)

    def _read(self, segment: str) -> _Reading:
        body = segment.lstrip()
        start = len(segment) - len(body)
        name_end = body.find("\n")
        if name_end < 0:
            return _Reading(undecided=self._could_be_name(body))
        spec = self.specs.get(body[:name_end].rstrip(_NAME_PADDING))
        arguments = body[name_end + 1 :]
        if spec is None or not arguments.startswith("{"):
            return _Reading(undecided=spec is not None and not arguments)
        braces = arguments.count("}")
        if braces == self._braces_tried:
            return _Reading(undecided=True, call_shaped=True)  # no new closing brace: still not closed
        self._braces_tried = braces
        try:
            value, size = _DECODER.raw_decode(arguments)
        except ValueError:
            return _Reading(undecided=True, call_shaped=True)
        call = ToolCall(new_call_id(), spec.name, arguments_json(_fitted(value, spec)))
        return _Reading(call=call, used=start + name_end + 1 + size)

    def _could_be_name(self, text: str) -> bool:
        """`text` (no line break yet) may still turn out to be an offered tool's name line."""
        if not text:
            return bool(self.specs)
        name = text.rstrip(_NAME_PADDING)
        if name != text:
            return name in self.specs
        return any(candidate.startswith(name) for candidate in self.specs)

    def _emit(self, call: ToolCall) -> ToolCallUpdate:
        delta = ToolCallDelta(self._calls, call)
        self._calls += 1
        self._after_call = True
        self._held_space = ""
        return ToolCallUpdate(tool_calls=(delta,))

    def _content(self, text: str, final: bool = False) -> ToolCallUpdate:
        """As `SectionParser._content`: whitespace after a call, and trailing whitespace that a call may follow,
        is held back and dropped if a call comes."""
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


def _fitted(arguments: dict[str, Any], spec: ToolSpec) -> dict[str, Any]:
    """String values the schema wants as another type ("3" for an integer) are converted; the rest stay."""
    return {key: _fitted_value(value, spec.property_schema(key)) for key, value in arguments.items()}


def _fitted_value(value: Any, schema: Mapping[str, Any]) -> Any:
    types = schema_types(schema)
    if not isinstance(value, str) or not types or "string" in types:
        return value
    return decode_argument(value, schema)
