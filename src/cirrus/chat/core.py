"""The chat sequence every protocol shares: resolve the model, find its chat family, plan tools, JSON mode and
reasoning, run, and parse the answer into reasoning, content and tool calls.

An adapter (Workers AI's `/ai/run`, OpenAI's chat completions and Responses, Anthropic's Messages, the embedded
SDK) decodes its body into a `ChatRequest`, calls `start_chat` with the `ChatEngine` it runs on, and encodes
the `ChatResult` or the stream of `ChatDelta` and `ChatEnd` events in its own shape. Where a request runs is the
engine's business: the gateway's pipeline for one HTTP call (scopes, limits, cache, metering), or the bare
service inside `Ai.local()`. So the same body answers the same way in-process and over HTTP.
`count_chat_tokens` plans a request the same way and asks the engine only for its prompt's size.
"""

import dataclasses
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from cirrus.catalog import ModelSpec
from cirrus.chat.answer import ChatResult, ChatStream, json_answer, parse_whole
from cirrus.chat.family_lookup import ModelFiles, Specs, model_family
from cirrus.chat.finetune_ref import split_finetune
from cirrus.chat.options import ChatOptions
from cirrus.chat.plan import ChatPlan, plan_chat
from cirrus.families import ChatDelta
from cirrus.runtime.events import GenerationEvent, TextDelta
from cirrus.runtime.params import GenerationInput, SamplingParams, Usage
from cirrus.service import Completion


class Events(Protocol):
    """A started generation as the gateway's `Answer` and the service's `Generation` both are."""

    def __aiter__(self) -> AsyncIterator[GenerationEvent]: ...

    async def collect(self) -> Completion: ...

    async def aclose(self) -> None: ...

    def processed_usage(self) -> Usage:
        """Once the run has started, at least the prompt's tokens (and how many of them were cached)."""
        ...


class ChatEngine(Protocol):
    """What the core runs a chat on. `resolve` checks that the caller may use the model before saying whether
    it exists; `run` starts the generation and returns once it has started, so that a failure before the first
    token is the caller's error, not a broken stream."""

    @property
    def model_files(self) -> ModelFiles: ...

    @property
    def catalog(self) -> Specs: ...

    def resolve(self, model: str) -> ModelSpec: ...

    async def run(self, model: str, inputs: GenerationInput, request: "ChatRequest") -> Events:
        """`request` for what the run needs besides the input: keep-alive, whether to wait for a slot."""
        ...

    async def count(self, model: str, inputs: GenerationInput) -> int:
        """The prompt tokens a run of `inputs` would report; nothing is generated."""
        ...


@dataclass(frozen=True)
class ChatRequest:
    """`messages` in OpenAI's shape, or a `prompt` the chat template wraps as one user turn (sent as it is when
    `raw`). `max_tokens` None is the model's default."""

    model: str
    messages: Sequence[Mapping[str, Any]] | None = None
    prompt: str | None = None
    raw: bool = False
    options: ChatOptions = field(default_factory=ChatOptions)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int | None = None
    keep_alive_s: float | None = None
    reject_if_busy: bool = (
        False  # Workers AI's rejectIfBusy: refuse at once (429) rather than wait for a slot
    )
    lora: str | None = None  # a fine-tune of the model (its id or name), applied as a LoRA adapter


@dataclass(frozen=True)
class ChatEnd:
    """The stream's last event. `reasoning_tokens` is None for a raw prompt, which has no chat format."""

    finish_reason: str
    usage: Usage
    reasoning_tokens: int | None
    stop_sequence: str | None = None  # the stop string that ended the answer, if one did


ChatEvent = ChatDelta | ChatEnd


class ChatRun:
    """A started answer: iterate its events once, or await `whole()`; `aclose()` releases it either way."""

    def __init__(self, spec: ModelSpec, plan: ChatPlan | None, events: Events) -> None:
        self.spec = spec
        self.plan = plan
        self._events = events

    @property
    def model(self) -> str:
        return self.spec.id

    @property
    def raw(self) -> bool:
        """A raw prompt, sent as it is: no chat format, so no reasoning or tool calls."""
        return self.plan is None

    @property
    def json_mode(self) -> bool:
        return self.plan is not None and self.plan.json_mode

    async def __aiter__(self) -> AsyncIterator[ChatEvent]:
        """In JSON mode the text goes out as it comes and is checked whole before the end: an answer that is not
        complete JSON ends the stream with `JsonModeFailed` instead of `ChatEnd`."""
        parsed = ChatStream(self.plan) if self.plan is not None else None
        content: list[str] = []
        try:
            async for event in self._events:
                if isinstance(event, TextDelta):
                    delta = parsed.feed(event.text) if parsed else ChatDelta(content=event.text)
                    content.append(delta.content)
                    if not delta.empty:
                        yield delta
                    continue
                if parsed is None:
                    yield ChatEnd(event.finish_reason, event.usage, None, event.stop_sequence)
                    return
                if not (last := parsed.finish()).empty:
                    content.append(last.content)
                    yield last
                if self.json_mode:
                    json_answer("".join(content), event.finish_reason)
                reason = parsed.finish_reason(event.finish_reason)
                reasoning_tokens = parsed.reasoning_tokens(event.usage)
                yield ChatEnd(reason, event.usage, reasoning_tokens, event.stop_sequence)
                return
        finally:
            await self._events.aclose()

    async def whole(self) -> ChatResult:
        """The parsed answer; in JSON mode a complete JSON value, else `JsonModeFailed`."""
        try:
            completion = await self._events.collect()
        finally:
            await self._events.aclose()
        if self.plan is None:
            result = ChatResult("", completion.text, (), completion.finish_reason, 0, completion.usage)
        else:
            result = parse_whole(self.plan, completion.text, completion.finish_reason, completion.usage)
        return replace(result, stop_sequence=completion.stop_sequence)

    async def aclose(self) -> None:
        await self._events.aclose()

    def prompt_usage(self) -> Usage:
        """The prompt's tokens and the cached share of them, known from the start (completion tokens: 0)."""
        usage = self._events.processed_usage()
        return Usage(usage.prompt_tokens, 0, usage.cached_tokens)


async def start_chat(engine: ChatEngine, request: ChatRequest) -> ChatRun:
    request = _finetune_apart(request)
    spec, plan, inputs = await _planned(engine, request)
    events = await engine.run(spec.id, inputs, request)
    return ChatRun(spec, plan, events)


async def count_chat_tokens(engine: ChatEngine, request: ChatRequest) -> int:
    """The prompt tokens `start_chat` would send the model for `request`, planned the same way (family, tools,
    JSON mode, thinking switch); nothing is generated. A fine-tune does not change the count."""
    spec, _, inputs = await _planned(engine, _finetune_apart(request))
    return await engine.count(spec.id, inputs)


def _finetune_apart(request: ChatRequest) -> ChatRequest:
    model, lora = split_finetune(request.model, request.lora)
    return replace(request, model=model, lora=lora)


async def _planned(
    engine: ChatEngine, request: ChatRequest
) -> tuple[ModelSpec, ChatPlan | None, GenerationInput]:
    spec = engine.resolve(request.model)
    sampling = dataclasses.replace(request.sampling, max_tokens=request.max_tokens or spec.max_tokens_default)
    plan = await _plan(engine, spec, request, sampling)
    inputs = (
        plan.inputs
        if plan is not None
        else GenerationInput(prompt=request.prompt, raw=True, sampling=sampling)
    )
    return spec, plan, inputs


async def _plan(
    engine: ChatEngine, spec: ModelSpec, request: ChatRequest, sampling: SamplingParams
) -> ChatPlan | None:
    """None for a raw prompt, which is sent as it is: chat features need a chat template."""
    if request.raw and request.prompt is not None:
        return None
    family = await model_family(spec, engine.model_files, engine.catalog)
    return plan_chat(family, request.messages, request.options, sampling, prompt=request.prompt)
