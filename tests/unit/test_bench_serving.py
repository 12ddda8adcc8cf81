"""The serving benchmark's pure parts: which phases run, and the verdicts against llama-server (the servers
themselves are measured by running bench/serving.py)."""

import argparse
import random

import pytest
from bench.core import Stream
from bench.serving import (
    CIRRUS,
    LLAMA_SERVER,
    PEER,
    PHASES,
    Check,
    Cold,
    Level,
    ProcessStart,
    Prompt,
    Reply,
    cold_lines,
    cold_prompt,
    fresh_cold_prompt,
    fresh_tags,
    parse_phases,
    targets,
)

CHECK = Check(prompt_tokens=10, completion_tokens=4, text="same")


def reply(ttft_s: float, decode_s_per_token: float, tokens: int = 5, cached: int | None = None) -> Reply:
    """A streamed reply sent at 0: its first token after ttft_s, the others decode_s_per_token apart."""
    stamps = [ttft_s + i * decode_s_per_token for i in range(tokens)]
    return Reply(Stream.of(0.0, stamps, tokens, 10), 0.0, stamps[-1], tokens, "length", cached)


def level(server: str, concurrency: int, ttft_s: float, decode_s: float, wall_s: float) -> Level:
    return Level(server, concurrency, wall_s, [reply(ttft_s, decode_s) for _ in range(4)], CHECK)


def cold(cirrus_ttft_s: float, llama_server_s: list[float], fresh_ttft_s: float | None = None) -> Cold:
    """Three runs; the fresh-prompt series only when fresh_ttft_s is given."""
    starts = [ProcessStart(s - 0.1, s, reply(s, 0.01)) for s in llama_server_s]
    fresh = [] if fresh_ttft_s is None else [reply(fresh_ttft_s, 0.01, cached=20)] * 3
    repeated = [reply(cirrus_ttft_s, 0.01, cached=c) for c in (0, 62, 62)]
    return Cold(repeated, [0.4] * 3, [], starts, fresh)


def verdicts(lines: list[str]) -> dict[str, str]:
    """Each target line's verdict, by the text before its first colon."""
    return {line.split(":")[0]: line.split()[-1] for line in lines}


def test_phases_keep_the_benchmarks_order_and_refuse_unknown_names() -> None:
    assert parse_phases("cold, levels") == ("levels", "cold")
    assert parse_phases(",".join(PHASES)) == PHASES
    for text in ("cold,warm", "", ","):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_phases(text)


def test_cold_start_targets_against_llama_server_pass_and_fail_on_their_thresholds() -> None:
    found = verdicts(targets([], cold(0.090, [0.400, 0.380, 0.500]), None))
    assert found == {
        "cold-start TTFT <= 0.5x naive process, repeated prompt": "PASS",
        "cold-start TTFT <= 100 ms, repeated prompt (median of 3)": "PASS",
        "cold-start TTFT <= 0.25x llama-server process start, repeated prompt": "PASS",
    }
    slow = verdicts(targets([], cold(0.120, [0.400]), None))
    assert slow["cold-start TTFT <= 100 ms, repeated prompt (median of 3)"] == "FAIL"
    assert slow["cold-start TTFT <= 0.25x llama-server process start, repeated prompt"] == "FAIL"


def test_each_cold_start_series_gets_its_own_labelled_verdicts_against_llama_server() -> None:
    found = verdicts(targets([], cold(0.090, [0.400, 0.380, 0.500], fresh_ttft_s=0.120), None))
    assert found == {
        "cold-start TTFT <= 0.5x naive process, repeated prompt": "PASS",
        "cold-start TTFT <= 100 ms, repeated prompt (median of 3)": "PASS",
        "cold-start TTFT <= 0.25x llama-server process start, repeated prompt": "PASS",
        "cold-start TTFT <= 100 ms, fresh prompt (median of 3)": "FAIL",
        "cold-start TTFT <= 0.25x llama-server process start, fresh prompt": "FAIL",
    }


def test_without_llama_server_only_the_peers_targets_are_given() -> None:
    levels = [level(s, c, 0.02, 0.01, 1.0) for c in (1, 8) for s in (PEER, CIRRUS)]
    lines = targets(levels, cold(0.090, []), None)
    assert not any(LLAMA_SERVER in line for line in lines)
    assert len(lines) == 5  # c=1 twice, c=8 twice, cold start once


def test_level_targets_against_llama_server_compare_ttft_decode_and_aggregate() -> None:
    levels = [
        level(CIRRUS, 1, 0.020, 0.010, 1.0),
        level(LLAMA_SERVER, 1, 0.025, 0.0099, 1.0),  # Cirrus decodes at 0.99x its speed
        level(CIRRUS, 8, 0.05, 0.02, 1.0),
        level(LLAMA_SERVER, 8, 0.05, 0.02, 1.5),  # Cirrus 1.5x its aggregate
        level(CIRRUS, 16, 0.05, 0.02, 1.0),
        level(LLAMA_SERVER, 16, 0.05, 0.02, 1.3),  # 1.3x
    ]
    found = verdicts(targets(levels, None, None))
    assert found["c=1 TTFT p50 <= llama-server's"] == "PASS"
    assert found["c=1 decode >= 0.98x llama-server's"] == "PASS"
    assert found["c=8 aggregate >= 1.4x llama-server's"] == "PASS"
    assert found["c=16 aggregate >= 1.4x llama-server's"] == "FAIL"


def test_a_level_llama_server_did_not_run_is_reported_as_not_measured() -> None:
    levels = [level(s, 1, 0.03, 0.01, 1.0) for s in (PEER, CIRRUS)] + [
        level(LLAMA_SERVER, 1, 0.02, 0.005, 1.0)
    ]
    lines = targets(levels, None, None)
    assert verdicts(lines)["c=1 TTFT p50 <= llama-server's"] == "FAIL"
    assert verdicts(lines)["c=1 decode >= 0.98x llama-server's"] == "FAIL"
    assert lines.count("concurrency 8: not measured (see --levels)") == 2  # against either peer
    assert "concurrency 16: not measured (see --levels)" in lines


def test_cold_lines_show_llama_servers_process_start_beside_the_naive_process() -> None:
    lines = cold_lines(cold(0.090, [0.400, 0.380, 0.500]))
    naive = next(i for i, line in enumerate(lines) if "naive process" in line)
    assert "llama-server process: spawn to first token" in lines[naive + 1]
    assert "400 [380-500]" in " ".join(lines[naive + 1].split())
    assert lines[naive].index("[") == lines[naive + 1].index("[")  # the columns line up
    assert lines[naive].index("samples") == lines[naive + 1].index("samples")
    assert (
        "llama-server phases: ready (/health 200) 300 [280-400], first token after ready 100 [100-100]"
        in lines[-1]
    )
    assert not any(LLAMA_SERVER in line for line in cold_lines(cold(0.090, [])))


def test_cold_lines_show_both_series_and_each_requests_cached_tokens() -> None:
    lines = cold_lines(cold(0.090, [0.400], fresh_ttft_s=0.150))
    repeated = next(line for line in lines if "Cirrus TTFT, repeated prompt" in line)
    fresh = next(line for line in lines if "Cirrus TTFT, fresh prompt" in line)
    assert " 90 [90-90] " in repeated and repeated.endswith("samples 90 90 90")
    assert " 150 [150-150] " in fresh and fresh.endswith("samples 150 150 150")
    assert repeated.index("[") == fresh.index("[")
    assert repeated.index("samples") == fresh.index("samples")
    cached = next(line for line in lines if "cached_tokens" in line)
    assert "repeated prompt 0 62 62; fresh prompt 20 20 20" in cached


def test_a_series_without_reported_cached_tokens_shows_dashes_and_an_unmeasured_one_is_left_out() -> None:
    measured = cold(0.090, [])
    measured.cirrus = [reply(0.09, 0.01)] * 2
    cached = next(line for line in cold_lines(measured) if "cached_tokens" in line)
    assert cached.endswith("repeated prompt - -")
    assert not any("fresh prompt" in line for line in targets([], measured, None))


@pytest.mark.parametrize("chat", [True, False])
def test_fresh_cold_prompts_are_new_right_after_the_templates_head_and_differ_each_run(chat: bool) -> None:
    prompts = [fresh_cold_prompt(chat, tag) for tag in fresh_tags(3, random.Random(1))]
    texts = [user_text(prompt) for prompt in prompts]
    repeated = user_text(cold_prompt(chat))
    assert len(set(texts)) == 3
    for text in texts:
        assert text.endswith(repeated) and not text.startswith(
            repeated[:10]
        )  # it differs from the first word
        assert len(text) - len(repeated) < 40  # about as many tokens
    if chat:  # no system message: the chat template's own default system prompt heads every one
        assert all(not isinstance(p, str) and [m["role"] for m in p] == ["user"] for p in prompts)


def user_text(prompt: Prompt) -> str:
    return prompt if isinstance(prompt, str) else prompt[-1]["content"]


def test_fresh_tags_are_distinct_numbers_that_share_no_fixed_part() -> None:
    tags = fresh_tags(10, random.Random(7))
    assert len(set(tags)) == 10 and all(tag.isdigit() and len(tag) == 6 for tag in tags)
    assert len({tag[:2] for tag in tags}) > 1  # no common head for the prefix cache to restore
    assert not set(tags) & set(fresh_tags(10, random.Random(8)))
