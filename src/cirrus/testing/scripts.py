"""Ready-made scripts for `write_scripted`: per family, reasoning then an answer, and reasoning then a tool call.

Each is written as the family's models write it (see cirrus.families' templates and parsers): GLM-4.5/4.6 open
the reasoning themselves and put newlines after the name and each argument pair; GLM-4.7's prompt already
opened the reasoning (`<|assistant|><think>`) and it writes no newlines; Kimi K2 writes its calls in a section,
with `functions.NAME:IDX` ids and JSON arguments. Each ends with the token that ends such a turn. What the
output parsers make of them is below: REASONING and ANSWER, TOOL_REASONING and WEATHER_CALL (offer
WEATHER_TOOL in the request).
"""

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
