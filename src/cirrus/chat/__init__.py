"""The chat core every protocol shares (`core.py`): tools, tool_choice, JSON mode and thinking switches in;
reasoning, content and tool calls out. Protocol-neutral: each adapter translates its own body into a
`ChatRequest` and the parsed answer into its own fields."""

from cirrus.chat.answer import ChatResult
from cirrus.chat.core import (
    ChatEnd,
    ChatEngine,
    ChatEvent,
    ChatRequest,
    ChatRun,
    Events,
    count_chat_tokens,
    start_chat,
)
from cirrus.chat.options import ChatOptions, chat_options
from cirrus.families import ChatDelta, ToolCall

__all__ = [
    "ChatDelta",
    "ChatEnd",
    "ChatEngine",
    "ChatEvent",
    "ChatOptions",
    "ChatRequest",
    "ChatResult",
    "ChatRun",
    "Events",
    "ToolCall",
    "chat_options",
    "count_chat_tokens",
    "start_chat",
]
