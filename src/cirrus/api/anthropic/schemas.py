"""Anthropic Messages request bodies, with Anthropic's ranges, read into the chat core's request.

Content blocks become OpenAI-shaped messages, which the chat core reads: `text` blocks join into the turn's
text, an assistant's `tool_use` blocks become its tool calls and its `thinking` blocks its reasoning, and a user
turn's `tool_result` blocks become tool messages, ahead of the turn's text as Anthropic orders them.
"""

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cirrus.chat import ChatOptions, ChatRequest, chat_options
from cirrus.runtime.params import SamplingParams

MAX_PROMPT_CHARS = 131072


class TextBlock(BaseModel):
    type: Literal["text"]
    text: str = Field(max_length=MAX_PROMPT_CHARS)


class ToolUseBlock(BaseModel):
    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]


class ToolResultBlock(BaseModel):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: str | list[TextBlock] = ""
    is_error: bool = False

    def text(self) -> str:
        text = self.content if isinstance(self.content, str) else "".join(b.text for b in self.content)
        return f"Error: {text}" if self.is_error else text


class ThinkingBlock(BaseModel):
    model_config = ConfigDict(extra="ignore")  # the signature: Cirrus's models sign nothing

    type: Literal["thinking"]
    thinking: str


ContentBlock = Annotated[
    TextBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock, Field(discriminator="type")
]


BLOCK_TYPES = ("text", "tool_use", "tool_result", "thinking")


class Message(BaseModel):
    role: Literal["user", "assistant"]
    content: str | list[ContentBlock] = Field(max_length=MAX_PROMPT_CHARS)

    @field_validator("content", mode="before")
    @classmethod
    def _known_blocks(cls, value: Any) -> Any:
        """One clear error for a block Cirrus's text models cannot take (an image, a document), rather than one
        per member of the content's union."""
        if isinstance(value, list):
            for index, block in enumerate(value):
                kind = block.get("type") if isinstance(block, dict) else None
                if kind not in BLOCK_TYPES:
                    raise ValueError(
                        f"content[{index}] must be a block of type {', '.join(BLOCK_TYPES)}, not {kind!r}"
                    )
        return value

    def blocks(self) -> list[Any]:
        return [TextBlock(type="text", text=self.content)] if isinstance(self.content, str) else self.content

    def chat_messages(self) -> list[dict[str, Any]]:
        blocks = self.blocks()
        text = "".join(b.text for b in blocks if isinstance(b, TextBlock))
        if self.role == "user":
            results = [_tool_message(b) for b in blocks if isinstance(b, ToolResultBlock)]
            return [*results, {"role": "user", "content": text}] if text or not results else results
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls := [_tool_call(b) for b in blocks if isinstance(b, ToolUseBlock)]:
            message["tool_calls"] = calls
        if thinking := "".join(b.thinking for b in blocks if isinstance(b, ThinkingBlock)):
            message["reasoning_content"] = thinking
        return [message]


def _tool_message(block: ToolResultBlock) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": block.tool_use_id, "content": block.text()}


def _tool_call(block: ToolUseBlock) -> dict[str, Any]:
    arguments = json.dumps(block.input, ensure_ascii=False)
    return {"id": block.id, "type": "function", "function": {"name": block.name, "arguments": arguments}}


class Tool(BaseModel):
    name: str
    description: str = ""
    input_schema: dict[str, Any]

    def openai(self) -> dict[str, Any]:
        function = {"name": self.name, "description": self.description, "parameters": self.input_schema}
        return {"type": "function", "function": function}


class ToolChoice(BaseModel):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None

    def openai(self) -> Any:
        """Anthropic's `any` is OpenAI's "required"; `tool` names one function."""
        if self.type == "tool":
            return {"type": "function", "function": {"name": self.name}}
        return {"any": "required"}.get(self.type, self.type)


class Thinking(BaseModel):
    model_config = ConfigDict(extra="ignore")  # budget_tokens: the families' switch has no budget

    type: Literal["enabled", "disabled", "adaptive", "between_tools"]


class OutputFormat(BaseModel):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")  # effort: the families' switch is on or off

    format: OutputFormat | None = None

    def response_format(self) -> dict[str, Any] | None:
        """Structured outputs, as OpenAI's `response_format` names them."""
        if self.format is None:
            return None
        return {"type": "json_schema", "json_schema": {"name": "output", "schema": self.format.schema_}}


class CountTokensRequest(BaseModel):
    """`/v1/messages/count_tokens`: what a Messages body says about the prompt (no max_tokens, no sampling)."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None

    def chat_messages(self) -> list[dict[str, Any]]:
        system = self.system if isinstance(self.system, str) else "".join(b.text for b in self.system or [])
        turns = [turn for message in self.messages for turn in message.chat_messages()]
        return [{"role": "system", "content": system}, *turns] if system else turns

    def options(self, stream: bool) -> ChatOptions:
        tools = [tool.openai() for tool in self.tools] if self.tools else None
        choice = self.tool_choice.openai() if self.tool_choice else None
        thinking = None if self.thinking is None else self.thinking.type != "disabled"
        json_format = self.output_config.response_format() if self.output_config else None
        return chat_options(tools, choice, json_format, thinking, stream)

    def chat_request(self) -> ChatRequest:
        return ChatRequest(self.model, self.chat_messages(), options=self.options(stream=False))


class TokenCount(BaseModel):
    """What count_tokens answers: the prompt's tokens, cache reads included."""

    input_tokens: int


class MessagesRequest(CountTokensRequest):
    """`/v1/messages`: the prompt, with max_tokens and the sampling settings."""

    max_tokens: int = Field(ge=1, le=131072, strict=True)
    stop_sequences: list[str] | None = Field(default=None, max_length=16)
    temperature: float = Field(default=1.0, ge=0, le=1, strict=True)
    top_p: float = Field(default=1.0, ge=0, le=1, strict=True)
    top_k: int = Field(default=40, ge=1, le=50, strict=True)
    stream: bool = Field(default=False, strict=True)

    def chat_request(self) -> ChatRequest:
        options = self.options(self.stream)
        sampling = SamplingParams(
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            stop=tuple(self.stop_sequences or ()),
        )
        return ChatRequest(
            self.model, self.chat_messages(), options=options, sampling=sampling, max_tokens=self.max_tokens
        )
