"""The arithmetic behind `cirrus eval`, `cirrus bench` and `cirrus cost`, on cases small enough to check by hand."""

import math
from pathlib import Path

import numpy as np
import pytest

from cirrus.evals.bench import Timing, distribution, summarize
from cirrus.evals.context import ContextPoint, Limits, context_steps, fits
from cirrus.evals.corpus import CorpusError, default_corpus, load_corpus, sentences
from cirrus.evals.cost import (
    Capacity,
    TokenPrices,
    Traffic,
    break_even_requests_per_day,
    capacity_from_bench,
    instances_needed,
    request_cost,
    request_neurons,
    reserved_monthly,
    serverless_monthly,
)
from cirrus.evals.errors import EvalError
from cirrus.evals.stats import cosine, kl_divergence, log_softmax, percentile, perplexity

# -- distributions -----------------------------------------------------------------------------------------------


def test_log_softmax_rows_are_normalised_log_probabilities() -> None:
    logprobs = log_softmax([[1.0, 2.0, 3.0], [1000.0, 1000.0, 1000.0]])
    assert np.allclose(np.exp(logprobs).sum(axis=1), 1.0)
    assert np.allclose(logprobs[1], math.log(1 / 3))  # large logits do not overflow


def test_kl_of_identical_distributions_is_zero() -> None:
    p = log_softmax(np.random.default_rng(0).normal(size=(4, 50)))
    assert np.array_equal(kl_divergence(p, p), np.zeros(4))


def test_kl_matches_a_hand_computed_case() -> None:
    p, q = np.log([[0.5, 0.5]]), np.log([[0.9, 0.1]])
    expected = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    assert kl_divergence(p, q)[0] == pytest.approx(expected)
    assert kl_divergence(q, p)[0] != pytest.approx(expected)  # KL is not symmetric


def test_perplexity_of_a_uniform_model_is_the_vocabulary_size() -> None:
    vocab = 49152
    uniform = log_softmax(np.zeros((10, vocab)))
    assert perplexity(uniform[:, 7]) == pytest.approx(vocab)


def test_perplexity_of_a_certain_model_is_one_and_needs_tokens() -> None:
    assert perplexity([0.0, 0.0]) == 1.0
    with pytest.raises(ValueError):
        perplexity([])


def test_percentiles_interpolate_between_ranks() -> None:
    values = list(range(1, 101))  # 1..100
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 99) == pytest.approx(99.01)
    assert percentile([3.0], 90) == 3.0
    assert math.isnan(percentile([], 50))


def test_cosine_of_parallel_orthogonal_and_opposite_vectors() -> None:
    sims = cosine([[1.0, 0.0], [1.0, 0.0], [1.0, 2.0]], [[2.0, 0.0], [0.0, 3.0], [-1.0, -2.0]])
    assert np.allclose(sims, [1.0, 0.0, -1.0])


# -- cost ----------------------------------------------------------------------------------------------------------

TRAFFIC = Traffic(requests_per_day=86_400, peak_to_mean=2, input_tokens=100, output_tokens=50)
PRICES = TokenPrices(input_per_million=1.0, output_per_million=2.0)
# 4 streams at once, each 100/100 + 50/10 = 6 s per request: 2/3 of a request per second per instance
CAPACITY = Capacity(concurrency=4, prompt_tps=100, decode_tps=10)


def test_a_request_costs_its_tokens_and_the_same_in_neurons_at_the_workers_ai_price() -> None:
    assert request_cost(PRICES, TRAFFIC) == pytest.approx(200 / 1_000_000)
    assert request_neurons(PRICES, TRAFFIC) == pytest.approx(200 / 1_000_000 / 0.011 * 1000)
    doubled = TokenPrices(1.0, 2.0, usd_per_thousand_neurons=0.022)
    assert request_cost(doubled, TRAFFIC) == pytest.approx(400 / 1_000_000)


def test_serverless_month_is_thirty_days_of_requests() -> None:
    assert serverless_monthly(PRICES, TRAFFIC) == pytest.approx(86_400 * 30 * 200 / 1_000_000)


def test_reserved_instances_cover_the_peak() -> None:
    assert CAPACITY.requests_per_s(TRAFFIC) == pytest.approx(4 / 6)
    assert instances_needed(CAPACITY, TRAFFIC) == 3  # peak 2 requests/s over 2/3 each
    assert reserved_monthly(1.0, CAPACITY, TRAFFIC) == pytest.approx(3 * 24 * 30)
    quiet = Traffic(1, 1, 100, 50)
    assert instances_needed(CAPACITY, quiet) == 1  # one instance stays up however quiet it is


def test_break_even_where_serverless_meets_one_reserved_instance() -> None:
    even = break_even_requests_per_day(PRICES, 0.1, CAPACITY, TRAFFIC)
    assert even == pytest.approx(12_000)  # 24 h * $0.1 / $0.0002 per request
    at_even = Traffic(12_000, 2, 100, 50)
    assert serverless_monthly(PRICES, at_even) == pytest.approx(reserved_monthly(0.1, CAPACITY, at_even))


def test_no_break_even_when_one_instance_saturates_first() -> None:
    # $1/hour needs 120,000 requests/day to pay off, but one instance serves only 28,800 a day at peak 2x.
    assert break_even_requests_per_day(PRICES, 1.0, CAPACITY, TRAFFIC) is None
    assert break_even_requests_per_day(TokenPrices(0, 0), 1.0, CAPACITY, TRAFFIC) is None


def test_capacity_comes_from_a_bench_result_or_a_clear_error() -> None:
    bench = {"warm": {"concurrency": 2, "stream_prompt_tps": 300.0, "stream_decode_tps": 40.0}}
    assert capacity_from_bench(bench) == Capacity(2, 300.0, 40.0)
    bad_results: list[object] = [
        {},
        [],
        {"warm": {"concurrency": 2}},
        {"warm": {**bench["warm"], "stream_decode_tps": None}},
    ]
    for bad in bad_results:
        with pytest.raises(EvalError, match="bench"):
            capacity_from_bench(bad)


# -- bench summary and context limits ------------------------------------------------------------------------------


def test_bench_summary_percentiles_and_rates() -> None:
    timings = [
        Timing(ttft_s=0.1 * i, latency_s=1.0 * i, prompt_tokens=100, completion_tokens=11) for i in (1, 2, 3)
    ]
    summary = summarize(timings, ["one failed"], wall_s=4.0, concurrency=2)
    assert summary["ttft_s"]["p50"] == pytest.approx(0.2)
    assert summary["latency_s"]["p90"] == pytest.approx(2.8)
    assert summary["requests_per_s"] == pytest.approx(0.75)
    assert summary["output_tps"] == pytest.approx(33 / 4)
    assert summary["stream_prompt_tps"] == pytest.approx(100 / 0.2)
    assert summary["stream_decode_tps"] == pytest.approx(10 / 1.8)  # median of 10/0.9, 10/1.8, 10/2.7
    assert summary["errors"] == ["one failed"]
    assert distribution([1.0, 3.0])["mean"] == 2.0


def test_bench_summary_without_any_answer_is_an_error() -> None:
    with pytest.raises(EvalError, match="every request failed; the first error: refused"):
        summarize([], ["refused"], wall_s=1.0, concurrency=1)


def test_context_steps_stay_within_the_window_and_the_limit() -> None:
    assert context_steps(8192, None, None) == [512, 1024, 2048, 4096]
    assert context_steps(8192, 1024, None) == [512, 1024]
    assert context_steps(2048, 16384, None) == [512, 1024, 2048]
    assert context_steps(8192, 3000, None) == [512, 1024, 2048, 3000]
    assert context_steps(8192, 8192, None)[-1] == 8192
    assert context_steps(1024, None, [2048, 256, 1024]) == [256, 1024]
    with pytest.raises(EvalError):
        context_steps(8192, 16, None)


def test_a_context_fits_only_within_both_limits() -> None:
    point = ContextPoint(
        1024, 1000, ttft_s=2.0, prompt_tps=500, decode_tps=90, peak_rss_bytes=300, fits=False
    )
    assert fits(point, Limits())
    assert fits(point, Limits(time_limit_s=2.0, memory_budget_bytes=300))
    assert not fits(point, Limits(time_limit_s=1.9))
    assert not fits(point, Limits(memory_budget_bytes=299))


# -- corpus --------------------------------------------------------------------------------------------------------


def test_default_corpus_is_deterministic_and_substantial() -> None:
    first, second = default_corpus(), default_corpus()
    assert first.sha256 == second.sha256
    assert len(first.text) > 50_000


def test_user_corpus_errors_name_the_file(tmp_path: Path) -> None:
    empty, binary = tmp_path / "empty.txt", tmp_path / "binary.txt"
    empty.write_text("  \n")
    binary.write_bytes(b"\xff\xfe\x00bad")
    for path, words in ((tmp_path / "missing.txt", "not found"), (empty, "empty"), (binary, "not UTF-8")):
        with pytest.raises(CorpusError, match=words):
            load_corpus(path)


def test_sentences_keep_moderate_lengths_in_order() -> None:
    text = "Short one. This sentence has exactly seven words here.\n\nAnother sentence of six words now!"
    assert sentences(text, 10) == [
        "This sentence has exactly seven words here.",
        "Another sentence of six words now!",
    ]
    assert sentences(text, 1) == ["This sentence has exactly seven words here."]
