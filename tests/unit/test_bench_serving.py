"""The serving benchmark's pure parts: which phases run, and the verdicts against llama-server (the servers
themselves are measured by running bench/serving.py)."""

import argparse

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
    Reply,
    cold_lines,
    parse_phases,
    targets,
)

CHECK = Check(prompt_tokens=10, completion_tokens=4, text="same")


def reply(ttft_s: float, decode_s_per_token: float, tokens: int = 5) -> Reply:
    """A streamed reply sent at 0: its first token after ttft_s, the others decode_s_per_token apart."""
    stamps = [ttft_s + i * decode_s_per_token for i in range(tokens)]
    return Reply(Stream.of(0.0, stamps, tokens, 10), 0.0, stamps[-1], tokens, "length", None)


def level(server: str, concurrency: int, ttft_s: float, decode_s: float, wall_s: float) -> Level:
    return Level(server, concurrency, wall_s, [reply(ttft_s, decode_s) for _ in range(4)], CHECK)


def cold(cirrus_ttft_s: float, llama_server_s: list[float]) -> Cold:
    starts = [ProcessStart(s - 0.1, s, reply(s, 0.01)) for s in llama_server_s]
    return Cold([reply(cirrus_ttft_s, 0.01)] * 3, [0.4] * 3, [], starts)


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
        "cold-start TTFT <= 0.5x naive process": "PASS",
        "cold-start TTFT <= 100 ms (median of 3)": "PASS",
        "cold-start TTFT <= 0.25x llama-server process start": "PASS",
    }
    slow = verdicts(targets([], cold(0.120, [0.400]), None))
    assert slow["cold-start TTFT <= 100 ms (median of 3)"] == "FAIL"
    assert slow["cold-start TTFT <= 0.25x llama-server process start"] == "FAIL"


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
    assert "400 [380-500]" in lines[naive + 1]
    assert lines[naive].index("[") == lines[naive + 1].index("[")  # the columns line up
    assert (
        "llama-server phases: ready (/health 200) 300 [280-400], first token after ready 100 [100-100]"
        in lines[-1]
    )
    assert not any(LLAMA_SERVER in line for line in cold_lines(cold(0.090, [])))
