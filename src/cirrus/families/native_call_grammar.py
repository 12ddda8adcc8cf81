"""A GBNF grammar that makes a native family's answer be tool calls: `tool_choice` "required" or a named tool.

The answer may first reason, as far as the family and the thinking switch allow it: where the prompt already
opened the reasoning (GLM-4.7 with thinking on), the answer starts inside it and must close it; where the model
opens the block itself (GLM-4.5/4.6, Kimi K2, and GLM-4, whose parser reads such a block too), the block is
optional; with thinking off there is none. Then come one or more calls to the offered tools, in the family's
own markup (`native_call_rules`), and nothing else: no text before or between the calls beyond a little
whitespace. The end-of-generation token is allowed only once the calls are complete.
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cirrus.families.errors import FamilyInputError
from cirrus.families.gbnf_build import literal, text_then
from cirrus.families.glm import GlmToolCallParser
from cirrus.families.glm4 import Glm4ToolCallParser
from cirrus.families.kimi import KimiToolCallParser
from cirrus.families.native_call_rules import glm4_call_rules, glm_call_rules, kimi_call_rules
from cirrus.families.registry import Family, ToolParserFactory
from cirrus.families.toolcalls import ToolSpec, tool_specs

# The grammar writes what the family's parser reads.
CALL_RULES: dict[ToolParserFactory, Callable[[Sequence[ToolSpec]], list[str]]] = {
    GlmToolCallParser: glm_call_rules,
    Glm4ToolCallParser: glm4_call_rules,
    KimiToolCallParser: kimi_call_rules,
}
WHITESPACE = "nc-ws ::= [ \\n]{0,2}"  # between the reasoning and a call, and between calls
MAX_CALL_GRAMMAR_CHARS = 256 * 1024  # each tool's schema is held to json_schema_grammar's own limit already


def native_call_grammar(
    family: Family, tools: Sequence[Mapping[str, Any]], enable_thinking: bool | None = None
) -> str:
    """Calls (one or more) to `tools` only, in `family`'s markup, after the reasoning the prompt allows."""
    specs = list(tool_specs(tools).values())
    if not specs:
        raise FamilyInputError("tools must list at least one function with a name", "tools")
    call_rules = CALL_RULES.get(family.tool_parser)
    if call_rules is None:
        raise FamilyInputError(f"the {family.name} chat format has no tool-call grammar", "tool_choice")
    reasoning, reasoning_rules = _reasoning(family, enable_thinking)
    lines = [f"root ::= {reasoning}nc-ws nc-calls", WHITESPACE, *reasoning_rules, *call_rules(specs)]
    grammar = "\n".join(lines) + "\n"
    if len(grammar) > MAX_CALL_GRAMMAR_CHARS:
        raise FamilyInputError(
            f"the tools make a call grammar of {len(grammar)} characters, more than the "
            f"{MAX_CALL_GRAMMAR_CHARS} allowed: offer fewer tools or smaller schemas",
            "tools",
        )
    return grammar


def _reasoning(family: Family, enable_thinking: bool | None) -> tuple[str, list[str]]:
    """What may come before the calls: the start of `root`, and its rules."""
    if enable_thinking is False:
        return "", []  # the prompt closed the reasoning (or the family has no switch and never opened it)
    rules = text_then("nc-think", family.think_close)
    if family.prompt_opens_thinking:
        return "nc-think-0 ", rules
    return f"( nc-ws {literal(family.think_open)} nc-think-0 )? ", rules
