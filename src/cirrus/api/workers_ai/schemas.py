"""Workers AI inputs (text generation, text embeddings), with the ranges Workers AI documents, and the result
envelope."""

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from cirrus.api.embeddings import texts_of
from cirrus.api.keep_alive import check_keep_alive, parse_keep_alive
from cirrus.api.options import GenerationOptions
from cirrus.chat.options import ChatOptions, chat_options
from cirrus.runtime.embedding import MAX_TEXTS, EmbeddingInput
from cirrus.runtime.params import GenerationInput

MAX_PROMPT_CHARS = 131072


class ChatMessage(BaseModel):
    """`content` may be null on an assistant turn that only calls tools. Tool calls come in Workers AI's shape,
    `{"name", "arguments"}` (an optional `id`), or OpenAI's; a tool result names its call by `tool_call_id`, or
    by `name` (the latest call of that function)."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = Field(default=None, max_length=MAX_PROMPT_CHARS)
    tool_calls: list[Any] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    @model_validator(mode="after")
    def _content_unless_calling(self) -> "ChatMessage":
        if self.content is None and not self.tool_calls:
            raise ValueError(
                "'content' is required (it may be null only on an assistant turn with tool_calls)"
            )
        return self


class TextGenerationInput(GenerationOptions):
    """`prompt` (optionally `raw`) or `messages`, plus sampling options, with Workers AI's ranges."""

    prompt: str | None = Field(default=None, min_length=1, max_length=MAX_PROMPT_CHARS)
    messages: list[ChatMessage] | None = Field(default=None, min_length=1)
    raw: bool = Field(default=False, strict=True)
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    lora: str | None = Field(default=None, min_length=1, max_length=128)  # a fine-tune's id or name

    @model_validator(mode="after")
    def _prompt_or_messages(self) -> "TextGenerationInput":
        if self.prompt is not None and self.messages is not None:
            raise ValueError("send either 'prompt' or 'messages', not both")
        if self.prompt is None and self.messages is None:
            raise ValueError("'prompt' or 'messages' is required")
        if self.raw and (self.tools or self.response_format or self.chat_template_kwargs):
            raise ValueError("a raw prompt takes no tools, response_format or chat_template_kwargs")
        return self

    def generation_input(self, default_max_tokens: int) -> GenerationInput:
        """The input without chat features (tools, JSON mode, families): a raw prompt on the /ai/run route, and
        every request of the embedded SDK, which does not plan chats (`api/chat/plan.py` does, for the routes)."""
        messages = tuple(m.model_dump(exclude_none=True) for m in self.messages) if self.messages else None
        sampling = self.sampling(default_max_tokens)
        return GenerationInput(prompt=self.prompt, messages=messages, raw=self.raw, sampling=sampling)

    def chat_messages(self) -> list[dict[str, Any]] | None:
        return openai_messages(self.messages) if self.messages is not None else None

    def chat_options(self) -> ChatOptions:
        thinking = (self.chat_template_kwargs or {}).get("enable_thinking")
        return chat_options(self.tools, self.tool_choice, self.response_format, thinking, self.stream)


def openai_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """Workers AI's messages in OpenAI's shape (what the chat layer reads); calls without ids get one."""
    converted: list[dict[str, Any]] = []
    latest: dict[str, str] = {}  # function name -> id of its latest call
    for index, message in enumerate(messages):
        turn = {**message.model_dump(exclude_none=True), "content": message.content or ""}
        if message.tool_calls:
            turn["tool_calls"] = [
                _openai_call(c, f"call_{index}_{n}") for n, c in enumerate(message.tool_calls)
            ]
            latest.update((c["function"]["name"], c["id"]) for c in turn["tool_calls"] if _is_named_call(c))
        if message.role == "tool" and message.tool_call_id is None and message.name in latest:
            turn["tool_call_id"] = latest[message.name]
        converted.append(turn)
    return converted


def _openai_call(call: Any, default_id: str) -> Any:
    if not isinstance(call, dict) or "function" in call or "name" not in call:
        return {"id": default_id, **call} if isinstance(call, dict) and "id" not in call else call
    arguments = call.get("arguments", {})
    return {
        "id": call.get("id") or default_id,
        "type": "function",
        "function": {
            "name": call["name"],
            "arguments": arguments
            if isinstance(arguments, str)
            else json.dumps(arguments, ensure_ascii=False),
        },
    }


def _is_named_call(call: Any) -> bool:
    function = call.get("function") if isinstance(call, dict) else None
    return (
        isinstance(function, dict)
        and isinstance(function.get("name"), str)
        and isinstance(call.get("id"), str)
    )


class TextEmbeddingsInput(BaseModel):
    """`text`: one string, or a list of up to 100; answered as {"shape": [n, dimensions], "data": [...]}."""

    model_config = ConfigDict(extra="ignore")

    text: str | list[str] = Field(
        description=f"a string, or a list of 1 to {MAX_TEXTS} strings",
        json_schema_extra={"maxItems": MAX_TEXTS},
    )
    keep_alive: float | str | None = Field(default=None, description="seconds, or a duration such as '5m'")
    stream: bool = Field(default=False, strict=True, description="not supported: embeddings come at once")

    @field_validator("stream")
    @classmethod
    def _not_streamed(cls, value: bool) -> bool:
        if value:
            raise ValueError("text-embeddings models answer at once; leave 'stream' out or send false")
        return value

    @field_validator("text", mode="plain")
    @classmethod
    def _texts(cls, value: Any) -> Any:
        texts_of(value, "text")  # raises InvalidInput naming the text at fault
        return value

    @field_validator("keep_alive", mode="before")
    @classmethod
    def _valid_keep_alive(cls, value: Any) -> Any:
        return check_keep_alive(value)

    def embedding_input(self) -> EmbeddingInput:
        return texts_of(self.text, "text")

    def keep_alive_s(self) -> float | None:
        return parse_keep_alive(self.keep_alive)


GENERATION_FIELDS = frozenset({"prompt", "messages"})
EMBEDDING_FIELDS = frozenset({"text"})


def envelope(result: Any) -> dict[str, Any]:
    return {"result": result, "success": True, "errors": [], "messages": []}


def paged_envelope(records: list[Any], page: int, per_page: int) -> dict[str, Any]:
    """One page of a list, with Cloudflare's `result_info`: the SDKs' paginators read pages until an empty one."""
    window = records[(page - 1) * per_page : page * per_page]
    info = {"page": page, "per_page": per_page, "count": len(window), "total_count": len(records)}
    return envelope(window) | {"result_info": info}
