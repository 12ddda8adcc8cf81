"""Model families' chat formats: templates, reasoning and tool-call parsing (pure logic, no engine)."""

from cirrus.families.errors import FamilyInputError
from cirrus.families.output import ChatDelta, ChatOutput, ChatOutputParser, parse_output
from cirrus.families.registry import FAMILIES, Family, family, family_of_template
from cirrus.families.toolcalls import ToolCall, ToolCallDelta

__all__ = [
    "FAMILIES",
    "ChatDelta",
    "ChatOutput",
    "ChatOutputParser",
    "Family",
    "FamilyInputError",
    "ToolCall",
    "ToolCallDelta",
    "family",
    "family_of_template",
    "parse_output",
]
