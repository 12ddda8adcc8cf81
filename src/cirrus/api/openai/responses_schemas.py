"""OpenAI Responses request bodies, with OpenAI's ranges, read into the chat core's request.

Input items become OpenAI chat messages, which the chat core reads: a message item is a turn (`developer` is a
system turn), `function_call` items are the calls of the assistant turn before them (a new assistant turn when
none precedes), and a `function_call_output` is a tool turn. Reasoning items are dropped: the families' templates
leave earlier reasoning out of the prompt anyway.
"""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator

from cirrus.chat import ChatRequest, chat_options
from cirrus.runtime.params import SamplingParams

MAX_PROMPT_CHARS = 131072
THINKING_OFF = ("none", "minimal")


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")  # annotations, logprobs

    type: Literal["input_text", "output_text", "text"]
    text: str = Field(max_length=MAX_PROMPT_CHARS)


def _text(content: str | list[TextPart]) -> str:
    return content if isinstance(content, str) else "".join(part.text for part in content)


class MessageItem(BaseModel):
    model_config = ConfigDict(extra="ignore")  # status

    type: Literal["message"] = "message"
    id: str | None = None
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[TextPart] = Field(max_length=MAX_PROMPT_CHARS)


class FunctionCallItem(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["function_call"]
    id: str | None = None
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str


class FunctionCallOutputItem(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["function_call_output"]
    id: str | None = None
    call_id: str = Field(min_length=1)
    output: str | list[TextPart]


class ReasoningItem(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["reasoning"]
    id: str | None = None


ITEM_TYPES = ("message", "function_call", "function_call_output", "reasoning")


def _item_type(value: Any) -> str:
    """An item without a `type` is a message (OpenAI's "easy input message")."""
    kind = value.get("type", "message") if isinstance(value, dict) else getattr(value, "type", "message")
    return str(kind)


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")],
    Discriminator(_item_type),
]


def chat_messages(items: list[Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, MessageItem):
            role = "system" if item.role == "developer" else item.role
            messages.append({"role": role, "content": _text(item.content)})
        elif isinstance(item, FunctionCallItem):
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments},
            }
            if not messages or messages[-1]["role"] != "assistant":
                messages.append({"role": "assistant", "content": ""})
            messages[-1].setdefault("tool_calls", []).append(call)
        elif isinstance(item, FunctionCallOutputItem):
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": _text(item.output)})
    return messages


class FunctionTool(BaseModel):
    model_config = ConfigDict(extra="ignore")  # strict: the grammar always holds the call to its schema

    type: Literal["function"]
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None

    def openai(self) -> dict[str, Any]:
        function = {"name": self.name, "description": self.description or "", "parameters": self.parameters}
        return {"type": "function", "function": function}


class TextFormat(BaseModel):
    model_config = ConfigDict(extra="ignore")  # description, strict

    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")

    def response_format(self) -> dict[str, Any]:
        if self.type != "json_schema":
            return {"type": self.type}
        return {
            "type": "json_schema",
            "json_schema": {"name": self.name or "output", "schema": self.schema_ or {}},
        }


class TextOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")  # verbosity

    format: TextFormat | None = None


class Reasoning(BaseModel):
    model_config = ConfigDict(extra="ignore")  # summary

    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None

    def enable_thinking(self) -> bool | None:
        """The families' switch is on or off: no effort or a minimal one is off, any other effort on."""
        return None if self.effort is None else self.effort not in THINKING_OFF


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    input: str | list[InputItem] = Field(min_length=1)
    instructions: str | None = Field(default=None, max_length=MAX_PROMPT_CHARS)
    previous_response_id: str | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    text: TextOptions | None = None
    reasoning: Reasoning | None = None
    max_output_tokens: int | None = Field(default=None, ge=1, le=131072, strict=True)
    temperature: float = Field(default=1.0, ge=0, le=2, strict=True)
    top_p: float = Field(default=1.0, ge=0, le=1, strict=True)
    stream: bool = Field(default=False, strict=True)
    store: bool = Field(default=True, strict=True)
    metadata: dict[str, str] | None = None
    parallel_tool_calls: bool = True
    user: str | None = None

    @field_validator("input", mode="before")
    @classmethod
    def _known_items(cls, value: Any) -> Any:
        """One clear error for an item Cirrus cannot take, rather than one per member of the input's union."""
        if isinstance(value, list):
            for index, item in enumerate(value):
                kind = _item_type(item) if isinstance(item, dict) else None
                if kind not in ITEM_TYPES:
                    raise ValueError(
                        f"input[{index}] must be an item of type {', '.join(ITEM_TYPES)}, not {kind!r}"
                    )
        return value

    def input_messages(self) -> list[dict[str, Any]]:
        """This request's own turns, without the instructions, which a later response does not inherit."""
        if isinstance(self.input, str):
            return [{"role": "user", "content": self.input}]
        return chat_messages(self.input)

    def chat_request(self, history: list[dict[str, Any]]) -> ChatRequest:
        """`history`: the conversation of the previous response, when the request continues one."""
        instructions = [{"role": "system", "content": self.instructions}] if self.instructions else []
        messages = [*instructions, *history, *self.input_messages()]
        tools = [tool.openai() for tool in self.tools] if self.tools else None
        response_format = self.text.format.response_format() if self.text and self.text.format else None
        thinking = self.reasoning.enable_thinking() if self.reasoning else None
        options = chat_options(tools, self._tool_choice(), response_format, thinking, self.stream)
        sampling = SamplingParams(temperature=self.temperature, top_p=self.top_p)
        return ChatRequest(
            self.model, messages, options=options, sampling=sampling, max_tokens=self.max_output_tokens
        )

    def _tool_choice(self) -> Any:
        """The Responses API names a function at the top level: `{"type": "function", "name": ...}`."""
        choice = self.tool_choice
        if isinstance(choice, dict) and choice.get("type") == "function" and "name" in choice:
            return {"type": "function", "function": {"name": choice["name"]}}
        return choice
