"""Kimi K2 tool calls, all inside one section:

`<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{json}
<|tool_call_end|>...<|tool_calls_section_end|>`

The call id is `functions.NAME:IDX` as the model wrote it: Kimi's template writes that id back into the
conversation (`<|tool_call_begin|>ID`, `## Return of ID`), and the model was trained on ids of that shape.
A call whose id does not have that shape, whose arguments are not a JSON object, or whose tool was not offered,
is given back as its own text; the section markers around it are dropped.
"""

import json
import re

from cirrus.families.sections import SectionParser
from cirrus.families.toolcalls import ToolCall, ToolCallUpdate, arguments_json, known_tool

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
ARGUMENT_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"
_CALL_ID = re.compile(r"(?:functions\.)?(.+):\d+")


class KimiToolCallParser(SectionParser):
    open_marker = SECTION_BEGIN

    def consume_region(self, buffer: str) -> tuple[int, ToolCallUpdate, bool] | None:
        start = len(buffer) - len(buffer.lstrip())
        rest = buffer[start:]
        if rest.startswith(SECTION_END):
            return start + len(SECTION_END), ToolCallUpdate(), True
        if rest.startswith(CALL_BEGIN):
            end = rest.find(CALL_END)
            if end < 0:
                return None
            raw = rest[: end + len(CALL_END)]
            call = self._call(rest[len(CALL_BEGIN) : end])
            return start + len(raw), self.emit_call(call) if call else self.give_back(raw), False
        if not rest or SECTION_END.startswith(rest) or CALL_BEGIN.startswith(rest):
            return (start, ToolCallUpdate(), False) if start else None
        return self._stray_text(buffer)

    def _stray_text(self, buffer: str) -> tuple[int, ToolCallUpdate, bool] | None:
        """Text inside the section that is no call: content, flagged, up to the next marker."""
        found = [i for i in (buffer.find(CALL_BEGIN), buffer.find(SECTION_END)) if i >= 0]
        if not found:
            return None
        end = min(found)
        return end, self.give_back(buffer[:end]), False

    def _call(self, body: str) -> ToolCall | None:
        call_id, marker, raw_arguments = body.partition(ARGUMENT_BEGIN)
        call_id = call_id.strip()
        id_match = _CALL_ID.fullmatch(call_id)
        if not marker or not id_match or not known_tool(self.specs, id_match.group(1)):
            return None
        try:
            arguments = json.loads(raw_arguments)
        except ValueError:
            return None
        if not isinstance(arguments, dict):
            return None
        return ToolCall(call_id, id_match.group(1), arguments_json(arguments))
