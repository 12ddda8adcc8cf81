"""Ready-made scripts for `write_scripted`: per family, reasoning then an answer, and reasoning then a tool call.

Each is written as the family's models write it (see cirrus.families' templates and parsers): GLM-4.5/4.6 open
the reasoning themselves and put newlines after the name and each argument pair; GLM-4.7's prompt already
opened the reasoning (`<|assistant|><think>`) and it writes no newlines; Kimi K2 writes its calls in a section,
with `functions.NAME:IDX` ids and JSON arguments. Each ends with the token that ends such a turn. What the
output parsers make of them is below: REASONING and ANSWER, TOOL_REASONING and WEATHER_CALL (offer
WEATHER_TOOL in the request).

FORCED_CALLS pair an answer script with a second choice (`Fallback`): where a grammar forbids the answer after
the reasoning (tool_choice "required"), the model writes the family's tool call instead.
"""

from dataclasses import dataclass
from typing import Any

REASONING = "The user asks about the weather"
ANSWER = "It is sunny in Paris."
TOOL_REASONING = "I should call get_weather"
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city today",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
WEATHER_CALL = ("get_weather", {"city": "Paris"})  # name, arguments

_REASONING = ("The", " user", " asks", " about", " the", " weather")
_ANSWER = ("It", " is", " sunny", " in", " Paris", ".")
_TOOL_REASONING = ("I", " should", " call", " get_weather")

GLM45_ANSWER = ("<think>", *_REASONING, "</think>", "\n", *_ANSWER, "<|user|>")
GLM45_TOOL_CALL = (
    "<think>",
    *_TOOL_REASONING,
    "</think>",
    "\n",
    "<tool_call>",
    "get_weather\n",
    "<arg_key>",
    "city",
    "</arg_key>\n",
    "<arg_value>",
    "Paris",
    "</arg_value>\n",
    "</tool_call>",
    "<|observation|>",
)
GLM47_ANSWER = (*_REASONING, "</think>", *_ANSWER, "<|user|>")
GLM47_TOOL_CALL = (
    *_TOOL_REASONING,
    "</think>",
    "<tool_call>",
    "get_weather",
    "<arg_key>",
    "city",
    "</arg_key>",
    "<arg_value>",
    "Paris",
    "</arg_value>",
    "</tool_call>",
    "<|observation|>",
)
KIMI_K2_ANSWER = ("<think>", *_REASONING, "</think>", *_ANSWER, "<|im_end|>")
KIMI_K2_TOOL_CALL = (
    "<think>",
    *_TOOL_REASONING,
    "</think>",
    "<|tool_calls_section_begin|>",
    "<|tool_call_begin|>",
    "functions.get_weather:0",
    "<|tool_call_argument_begin|>",
    '{"city":',
    ' "Paris"}',
    "<|tool_call_end|>",
    "<|tool_calls_section_end|>",
    "<|im_end|>",
)

# family name (cirrus.families) -> {"answer": script, "tool_call": script}
SCRIPTS: dict[str, dict[str, tuple[str, ...]]] = {
    "glm45": {"answer": GLM45_ANSWER, "tool_call": GLM45_TOOL_CALL},
    "glm47": {"answer": GLM47_ANSWER, "tool_call": GLM47_TOOL_CALL},
    "kimi_k2": {"answer": KIMI_K2_ANSWER, "tool_call": KIMI_K2_TOOL_CALL},
}


@dataclass(frozen=True)
class Fallback:
    """After the script's token `after`, the model's second choice starts `script` (then ends, as a script does):
    greedy decoding writes it only where a grammar forbids the script's own next token."""

    after: str
    script: tuple[str, ...]


def _call_after(tool_call: tuple[str, ...], after: str) -> Fallback:
    """The tool-call script from where its reasoning ends, as the second choice after `after`."""
    return Fallback(after, tool_call[tool_call.index(after) + 1 :])


# Kimi K2.5/K2.6 with thinking on: the prompt opened the reasoning (`<think>`), as GLM-4.7's does.
KIMI_K25_ANSWER = (*_REASONING, "</think>", *_ANSWER, "<|im_end|>")

# family name -> (an answer script, its second choice after the reasoning: the family's tool call)
FORCED_CALLS: dict[str, tuple[tuple[str, ...], Fallback]] = {
    "glm45": (GLM45_ANSWER, _call_after(GLM45_TOOL_CALL, "\n")),
    "glm47": (GLM47_ANSWER, _call_after(GLM47_TOOL_CALL, "</think>")),
    "kimi_k2": (KIMI_K2_ANSWER, _call_after(KIMI_K2_TOOL_CALL, "</think>")),
    "kimi_k25": (KIMI_K25_ANSWER, _call_after(KIMI_K2_TOOL_CALL, "</think>")),
}
