"""The multi-turn benchmark's pure parts: its workload, its schedule, its statistics, and a replay against a fake
chat endpoint (the real servers are measured by running bench/conversations.py itself)."""

import asyncio
import itertools
import json
import statistics
from typing import Any

import httpx
import pytest
from bench.conversations import (
    SYSTEM_PROMPT,
    USER_WORDS,
    Answer,
    Replay,
    Run,
    Schedule,
    cached_share,
    chat_messages,
    parse_args,
    parse_servers,
    percentile,
    plan_of,
    prompt_counts,
    ratio_lines,
    user_message,
    workload,
)
from bench.peers import bootstrap_setting, build_key, cmake_args
from bench.serving import CIRRUS, LLAMA_SERVER, PEER, Api


def test_user_messages_are_deterministic_distinct_and_of_a_realistic_length() -> None:
    messages = workload(32, 6)
    flat = [m for conversation in messages for m in conversation]
    assert messages == workload(32, 6)
    assert len(set(flat)) == len(flat) == 32 * 6
    low, high = USER_WORDS
    assert all(low <= len(m.split()) <= high for m in flat)


def test_conversations_beyond_the_subjects_still_differ() -> None:
    assert len({m for conversation in workload(100, 2) for m in conversation}) == 200


def test_a_conversation_opens_with_a_greeting_and_then_follows_up() -> None:
    assert user_message(3, 0).split()[0] in {"Hello!", "Hi,", "Good", "I"}
    assert user_message(3, 0) != user_message(3, 1)


def test_a_turn_sends_the_system_prompt_the_history_with_the_answers_and_the_new_message() -> None:
    messages = chat_messages([("q1", "a1"), ("q2", "a2")], "q3")
    assert messages == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "a2"},
        {"role": "user", "content": "q3"},
    ]


def test_one_caller_takes_turns_round_robin() -> None:
    schedule, order = Schedule(3, 2), []
    while (taken := schedule.take()) is not None:
        order.append(taken)
        schedule.answered(taken[0])
    assert order == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]
    assert schedule.untaken == 0


def test_a_conversation_waits_for_its_answer_before_its_next_turn() -> None:
    schedule = Schedule(2, 3)
    assert [schedule.take(), schedule.take()] == [(0, 0), (1, 0)]
    assert schedule.take() is None and not schedule.takeable and schedule.untaken == 4
    schedule.answered(1)
    assert schedule.take() == (1, 1)
    schedule.answered(0)
    assert schedule.take() == (0, 1)


def test_earlier_turns_of_other_conversations_come_first() -> None:
    schedule = Schedule(4, 2)
    assert [schedule.take(), schedule.take()] == [(0, 0), (1, 0)]
    schedule.answered(0)
    assert schedule.take() == (2, 0)  # not (0, 1): conversation 2 has not had its first turn


@pytest.mark.parametrize("count", [2, 3, 7, 100])
@pytest.mark.parametrize("q", [50, 99])
def test_percentile_matches_statistics_inclusive_quantiles(count: int, q: int) -> None:
    values = [float((i * 37) % 11) for i in range(count)]
    expected = statistics.quantiles(values, n=100, method="inclusive")[q - 1]
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_of_one_value_and_of_none() -> None:
    assert percentile([4.0], 99) == 4.0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_prompt_counts_prefer_usage_then_timings() -> None:
    usage = {"prompt_tokens": 120, "prompt_tokens_details": {"cached_tokens": 90}}
    assert prompt_counts(usage, {"cache_n": 1, "prompt_n": 2}) == (120, 90)
    assert prompt_counts({"prompt_tokens": 120}, {"cache_n": 80, "prompt_n": 40}) == (120, 80)
    assert prompt_counts({"prompt_tokens": 120}, {}) == (120, None)
    assert prompt_counts({}, {"cache_n": 80, "prompt_n": 40}) == (120, 80)
    assert prompt_counts({}, {}) == (None, None)


def answer(
    turn: int, ttft: float, prompt: int | None = 100, cached: int | None = 50, sent: float = 0.0
) -> Answer:
    return Answer(0, turn, "text", ttft, sent, sent + 1.0, 10, prompt, cached)


def test_cached_share_counts_only_answers_that_report_both() -> None:
    answers = [answer(0, 0.1, 100, 10), answer(1, 0.1, 300, 290), answer(2, 0.1, None, None)]
    assert cached_share(answers) == pytest.approx(300 / 400)
    assert cached_share([answer(0, 0.1, None, None)]) is None


def test_a_run_adds_up_tokens_over_its_wall_time_and_splits_ttft_by_turn() -> None:
    answers = [answer(0, 0.2, sent=0.0), answer(0, 0.4, sent=1.0), answer(1, 0.1, sent=3.0)]
    run = Run(CIRRUS, 2, 1, answers)
    assert run.wall_s == pytest.approx(4.0) and run.tokens == 30
    assert run.aggregate_tps == pytest.approx(7.5)
    assert run.ttft_s(50, turn=0) == pytest.approx(0.3)
    assert run.ttft_s(50, turn=1) == pytest.approx(0.1)
    assert run.ttft_s(50) == pytest.approx(0.2)


def test_ratios_compare_cirrus_with_llama_server_at_the_same_point() -> None:
    cirrus = Run(CIRRUS, 2, 1, [answer(0, 0.1), answer(1, 0.1)])
    peer = Run(LLAMA_SERVER, 2, 1, [answer(0, 0.2), answer(1, 0.4)])
    other = Run(PEER, 2, 1, [answer(0, 9.0), answer(1, 9.0)])
    lines = ratio_lines([cirrus, peer, other], turns=2)
    assert len(lines) == 4
    assert lines[2].split()[:5] == ["2", "1", "0.33x", "0.25x", "1.00x"]
    assert lines[2].split()[-2:] == ["0.50", "0.25"]
    assert ratio_lines([cirrus, other], turns=2) == []


def test_servers_are_named_on_the_command_line() -> None:
    assert parse_servers("llama-server,cirrus,cirrus") == (LLAMA_SERVER, CIRRUS)
    with pytest.raises(Exception, match="among"):
        parse_servers("vllm")


def test_llama_server_is_built_with_bootstraps_version_and_no_amx_flags() -> None:
    script = 'LLAMA_VERSION=0.3.36\nNO_AMX="-mno-amx-tile -mno-amx-int8"\n'
    assert bootstrap_setting("LLAMA_VERSION", script) == "0.3.36"
    args = cmake_args(bootstrap_setting("NO_AMX", script))
    assert "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8" in args and "-DLLAMA_BUILD_SERVER=ON" in args
    assert build_key("0.3.36", args, "x86_64") != build_key("0.3.36", args[:-1], "x86_64")
    assert build_key("0.3.36", args, "x86_64") != build_key("0.3.37", args, "x86_64")


# -- a replay against a fake chat endpoint -----------------------------------------------------------------------


def sse(*events: Any) -> bytes:
    return b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"


def fake_chat(seen: list[list[dict[str, str]]]) -> httpx.MockTransport:
    """Answers each chat with a text naming the request's position, and OpenAI usage."""

    def handle(request: httpx.Request) -> httpx.Response:
        messages = json.loads(request.content)["messages"]
        seen.append(messages)
        text = f"answer {len(seen)}"
        usage: dict[str, Any] = {"prompt_tokens": 10 * len(messages), "completion_tokens": 2}
        usage["prompt_tokens_details"] = {"cached_tokens": 10 * (len(messages) - 1)}
        chunks = [{"choices": [{"delta": {"content": part}}]} for part in (text[:7], text[7:])]
        return httpx.Response(200, content=sse(*chunks, {"choices": [], "usage": usage}))

    return httpx.MockTransport(handle)


@pytest.mark.parametrize("callers", [1, 3])
def test_a_replay_sends_each_conversation_its_own_history_with_the_servers_answers(callers: int) -> None:
    seen: list[list[dict[str, str]]] = []
    messages = workload(4, 3)
    replay = Replay(Api("@cf/test", chat=True), CIRRUS, messages, 8)

    async def run() -> None:
        async with httpx.AsyncClient(transport=fake_chat(seen), base_url="http://fake") as client:
            await asyncio.gather(*(replay.caller(client) for _ in range(callers)))

    asyncio.run(run())
    assert len(replay.answers) == len(seen) == 12
    for sent, got in zip(seen, sorted(replay.answers, key=lambda a: int(a.text.split()[1])), strict=True):
        conversation, turn = got.conversation, got.turn
        assert sent[-1]["content"] == messages[conversation][turn]
        assert len(sent) == 2 + 2 * turn
        earlier = [a for a in replay.answers if a.conversation == conversation and a.turn < turn]
        assert [m["content"] for m in sent if m["role"] == "assistant"] == [
            a.text for a in sorted(earlier, key=lambda a: a.turn)
        ]
        assert (got.prompt_tokens, got.cached_tokens, got.completion_tokens) == (
            20 + 20 * turn,
            10 + 20 * turn,
            2,
        )
    if callers == 1:
        assert [(a.conversation, a.turn) for a in replay.answers] == [
            (c, t) for t in range(3) for c in range(4)
        ]


def test_a_caller_pauses_after_each_answer_before_its_next_request() -> None:
    seen: list[list[dict[str, str]]] = []
    replay = Replay(Api("@cf/test", chat=True), CIRRUS, workload(2, 2), 8, pause_s=0.05)

    async def run() -> None:
        async with httpx.AsyncClient(transport=fake_chat(seen), base_url="http://fake") as client:
            await replay.caller(client)

    asyncio.run(run())
    sends = sorted(answer.sent for answer in replay.answers)
    assert len(sends) == 4 and all(later - earlier >= 0.05 for earlier, later in itertools.pairwise(sends))
    args = parse_args(["--pause-ms", "250"])
    assert plan_of(args).pause_s == pytest.approx(0.25)
