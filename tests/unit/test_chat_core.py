"""The chat core with a fake engine: no server, no worker. What it sends the engine, and what it makes of the
text the engine streams back, whole or as events, for a raw prompt, a plain chat, a native tool-calling family
and JSON mode."""

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from cirrus.catalog import ModelSpec
from cirrus.chat import (
    ChatDelta,
    ChatEnd,
    ChatEvent,
    ChatRequest,
    ChatRun,
    chat_options,
    count_chat_tokens,
    start_chat,
)
from cirrus.errors import InvalidInput, JsonModeFailed, NoSuchModel
from cirrus.runtime.events import Finished, GenerationEvent, TextDelta
from cirrus.runtime.params import GenerationInput, SamplingParams, Usage
from cirrus.service import Completion, collect
from cirrus.store.gguf import MetaValue
from tests.unit.fakes import spec

PLAIN = spec("plain", max_tokens_default=99)
GLM = spec("glm", family="glm47")
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
USAGE = Usage(12, 8)
ASK = ({"role": "user", "content": "Weather in Oslo?"},)
COUNTED = 17
GLM_CALL = (
    "The user wants Oslo.</think>"
    "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>"
)


class FakeEvents:
    def __init__(
        self, pieces: list[str], reason: str, usage: Usage, stop_sequence: str | None = None
    ) -> None:
        finished = Finished(reason, usage, stop_sequence)
        self._events: list[GenerationEvent] = [*(TextDelta(p) for p in pieces), finished]
        self.usage = usage
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[GenerationEvent]:
        for event in self._events:
            yield event

    async def collect(self) -> Completion:
        return await collect(self, False, 0.0)

    async def aclose(self) -> None:
        self.closed = True

    def processed_usage(self) -> Usage:
        return self.usage


class FakeModelFiles:
    def __init__(self) -> None:
        self.read: list[str] = []

    async def metadata(self, spec: ModelSpec) -> dict[str, MetaValue]:
        self.read.append(spec.id)
        return {}  # no chat template in the file: the model's own template renders the messages


class FakeEngine:
    """Answers every run with `pieces`, as the engine would stream them."""

    def __init__(
        self, pieces: list[str], reason: str = "stop", usage: Usage = USAGE, stop_sequence: str | None = None
    ) -> None:
        self.model_files = FakeModelFiles()
        self.catalog = self
        self.runs: list[tuple[str, GenerationInput, float | None]] = []  # model, input, keep-alive
        self.events: list[FakeEvents] = []
        self.counted: list[tuple[str, GenerationInput]] = []
        self.requests: list[ChatRequest] = []
        self._answer = (pieces, reason, usage, stop_sequence)

    def get(self, model_id: str) -> ModelSpec:
        specs = {PLAIN.id: PLAIN, GLM.id: GLM}
        if model_id not in specs:
            raise NoSuchModel(f"No such model {model_id}")
        return specs[model_id]

    def resolve(self, model: str) -> ModelSpec:
        return self.get(model)

    async def run(self, model: str, inputs: GenerationInput, request: ChatRequest) -> FakeEvents:
        self.runs.append((model, inputs, request.keep_alive_s))
        self.requests.append(request)
        self.events.append(FakeEvents(*self._answer))
        return self.events[-1]

    async def count(self, model: str, inputs: GenerationInput) -> int:
        self.counted.append((model, inputs))
        return COUNTED


def chat(model: str = PLAIN.id, **fields: Any) -> ChatRequest:
    return ChatRequest(model, **{"messages": ASK, **fields})


def started(engine: FakeEngine, request: ChatRequest) -> ChatRun:
    return asyncio.run(start_chat(engine, request))


def events_of(run: ChatRun) -> list[ChatEvent]:
    async def gather() -> list[ChatEvent]:
        return [event async for event in run]

    return asyncio.run(gather())


def test_a_plain_chat_runs_the_messages_with_the_models_default_max_tokens() -> None:
    engine = FakeEngine(["Sunny ", "and mild."])
    run = started(engine, chat(keep_alive_s=30.0))
    [(model, inputs, keep_alive)] = engine.runs
    assert (model, keep_alive, inputs.sampling.max_tokens) == (PLAIN.id, 30.0, 99)
    assert inputs.messages == ASK and inputs.family is None
    result = asyncio.run(run.whole())
    assert (result.content, result.finish_reason, result.usage) == ("Sunny and mild.", "stop", Usage(12, 8))
    assert engine.events[0].closed


def test_the_stop_sequence_that_ended_an_answer_and_the_prompts_usage_reach_the_adapter() -> None:
    usage = Usage(12, 8, cached_tokens=5)
    whole = started(FakeEngine(["Done"], usage=usage, stop_sequence="END"), chat())
    assert whole.prompt_usage() == Usage(12, 0, cached_tokens=5)
    assert asyncio.run(whole.whole()).stop_sequence == "END"
    streamed = started(FakeEngine(["Done"], usage=usage, stop_sequence="END"), chat())
    assert events_of(streamed)[-1] == ChatEnd("stop", usage, 0, "END")


def test_max_tokens_sent_overrides_the_default() -> None:
    engine = FakeEngine(["x"])
    started(engine, chat(max_tokens=5, sampling=SamplingParams(temperature=0)))
    [(_, inputs, _)] = engine.runs
    assert (inputs.sampling.max_tokens, inputs.sampling.temperature) == (5, 0)


def test_a_raw_prompt_is_sent_as_it_is_and_reads_no_chat_template() -> None:
    engine = FakeEngine(["3, 4"], reason="length")
    run = started(engine, ChatRequest(PLAIN.id, prompt="1, 2,", raw=True))
    [(_, inputs, _)] = engine.runs
    assert (inputs.prompt, inputs.raw, inputs.messages) == ("1, 2,", True, None)
    assert engine.model_files.read == [] and run.raw
    assert events_of(run) == [ChatDelta(content="3, 4"), ChatEnd("length", Usage(12, 8), None)]


def test_a_native_family_streams_reasoning_and_a_tool_call_then_ends_with_tool_calls() -> None:
    engine = FakeEngine([GLM_CALL[i : i + 5] for i in range(0, len(GLM_CALL), 5)])
    options = chat_options(TOOLS, "auto", None, None, stream=True)
    run = started(engine, chat(GLM.id, options=options))
    [(_, inputs, _)] = engine.runs
    assert inputs.family == "glm47" and inputs.tools
    events = events_of(run)
    deltas = [e for e in events if isinstance(e, ChatDelta)]
    assert "".join(d.reasoning for d in deltas) == "The user wants Oslo."
    [call] = [c.call for d in deltas for c in d.tool_calls]
    assert (call.name, call.arguments) == ("get_weather", '{"city": "Oslo"}')
    end = events[-1]
    assert isinstance(end, ChatEnd) and end.finish_reason == "tool_calls"
    assert end.reasoning_tokens is not None and 0 < end.reasoning_tokens < 8
    assert engine.events[0].closed


def test_json_mode_answers_the_value_or_fails_when_it_does_not_parse() -> None:
    options = chat_options(None, None, {"type": "json_object"}, None, stream=False)
    run = started(FakeEngine(['{"city": ', '"Oslo"}']), chat(options=options))
    assert run.json_mode and asyncio.run(run.whole()).json_value == {"city": "Oslo"}
    cut = started(FakeEngine(['{"city": '], reason="length"), chat(options=options))
    with pytest.raises(JsonModeFailed):
        asyncio.run(cut.whole())


def test_a_consumer_that_stops_early_closes_the_generation() -> None:
    engine = FakeEngine(["a", "b", "c"])
    run = started(engine, chat())

    async def first_only() -> ChatEvent:
        async for event in run:
            await run.aclose()
            return event
        raise AssertionError("no event")

    assert asyncio.run(first_only()) == ChatDelta(content="a")
    assert engine.events[0].closed


def test_an_unknown_model_or_a_bad_combination_fails_before_anything_runs() -> None:
    engine = FakeEngine(["x"])
    with pytest.raises(NoSuchModel):
        started(engine, chat("@cf/test/absent"))
    thinking = chat_options(None, None, None, True, stream=False)
    with pytest.raises(InvalidInput, match="no thinking switch"):
        started(engine, chat(options=thinking))
    assert engine.runs == []


def test_streamed_json_mode_ends_normally_when_whole_and_fails_when_cut() -> None:
    options = chat_options(None, None, {"type": "json_object"}, None, stream=True)
    whole = events_of(started(FakeEngine(['{"a": ', "1}"]), chat(options=options)))
    assert (
        isinstance(whole[-1], ChatEnd)
        and "".join(e.content for e in whole[:-1] if isinstance(e, ChatDelta)) == '{"a": 1}'
    )
    cut = started(FakeEngine(['{"a": '], reason="length"), chat(options=options))
    with pytest.raises(JsonModeFailed):
        events_of(cut)


def test_a_count_plans_the_input_as_a_run_would_and_generates_nothing() -> None:
    options = chat_options(TOOLS, "auto", None, True, stream=False)
    request = chat(GLM.id, options=options)
    engine = FakeEngine(["x"])
    assert asyncio.run(count_chat_tokens(engine, request)) == COUNTED
    assert engine.runs == [] and engine.events == []
    started(engine, request)
    [(counted_model, counted)] = engine.counted
    [(run_model, ran, _)] = engine.runs
    assert counted_model == run_model == GLM.id
    assert counted == ran and counted.family == "glm47" and counted.tools and counted.enable_thinking


def test_a_count_of_a_raw_prompt_sends_it_as_it_is_and_a_bad_one_counts_nothing() -> None:
    engine = FakeEngine(["x"])
    asyncio.run(count_chat_tokens(engine, ChatRequest(PLAIN.id, prompt="1, 2,", raw=True)))
    [(_, raw)] = engine.counted
    assert (raw.prompt, raw.raw, raw.messages) == ("1, 2,", True, None)
    with pytest.raises(NoSuchModel):
        asyncio.run(count_chat_tokens(engine, chat("@cf/test/absent")))
    thinking = chat_options(None, None, None, True, stream=False)
    with pytest.raises(InvalidInput, match="no thinking switch"):
        asyncio.run(count_chat_tokens(engine, chat(options=thinking)))
    assert len(engine.counted) == 1


def test_a_finetune_named_after_the_model_runs_on_the_base_model_with_that_lora() -> None:
    engine = FakeEngine(["Ahoy"])
    started(engine, chat(f"{PLAIN.id}:pirate"))
    started(engine, chat(PLAIN.id, lora="pirate"))
    assert [(r.model, r.lora) for r in engine.requests] == [(PLAIN.id, "pirate"), (PLAIN.id, "pirate")]
    assert [model for model, _, _ in engine.runs] == [PLAIN.id, PLAIN.id]


@pytest.mark.parametrize(
    ("model", "lora", "param"),
    [(f"{PLAIN.id}:", None, "model"), (":pirate", None, "model"), (f"{PLAIN.id}:pirate", "poet", "lora")],
)
def test_a_malformed_or_contradictory_finetune_is_refused_naming_the_field(
    model: str, lora: str | None, param: str
) -> None:
    engine = FakeEngine(["never"])
    with pytest.raises(InvalidInput) as refused:
        started(engine, chat(model, lora=lora))
    assert refused.value.param == param and engine.runs == []
