"""GLM-4.5 / 4.6 / 4.7 tool calls: `<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>`.

GLM-4.5 and 4.6 put a newline after the name and after each tag pair; 4.7 writes them without. Values are plain
text: decoded as JSON where that is valid, then fitted to the tool's parameter schema (`coerce`). Each value is
stripped of surrounding whitespace, as Z.ai's own parser does.
"""

import re

from cirrus.families.coerce import decode_argument
from cirrus.families.sections import SectionParser
from cirrus.families.toolcalls import ToolCall, ToolCallUpdate, arguments_json, known_tool, new_call_id

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
KEY_OPEN, KEY_CLOSE = "<arg_key>", "</arg_key>"
VALUE_OPEN, VALUE_CLOSE = "<arg_value>", "</arg_value>"
_PAIR = re.compile(r"\s*<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)
_NAME = re.compile(r"\s*([^\s<]+)")


class GlmToolCallParser(SectionParser):
    open_marker = OPEN

    def consume_region(self, buffer: str) -> tuple[int, ToolCallUpdate, bool] | None:
        end = buffer.find(CLOSE)
        if end < 0:
            return None
        body = buffer[:end]
        call = self._call(body)
        update = self.emit_call(call) if call else self.give_back(OPEN + body + CLOSE)
        return end + len(CLOSE), update, True

    def _call(self, body: str) -> ToolCall | None:
        name_match = _NAME.match(body)
        if not name_match or not known_tool(self.specs, name_match.group(1)):
            return None
        name = name_match.group(1)
        spec = self.specs.get(name)
        arguments = {}
        position = name_match.end()
        while pair := _PAIR.match(body, position):
            key = pair.group(1).strip()
            schema = spec.property_schema(key) if spec else {}
            arguments[key] = decode_argument(pair.group(2).strip(), schema)
            position = pair.end()
        if body[position:].strip():
            return None  # text that is neither a name nor a key/value pair
        return ToolCall(new_call_id(), name, arguments_json(arguments))
