"""Counting the completion tokens a model spends between its thinking markers."""

from cirrus.runtime.sequence import ReasoningCounter, ThinkingMarkers

MARKERS = ThinkingMarkers(open=1, close=2)


def test_tokens_between_the_markers_count_and_the_markers_do_not() -> None:
    counter = ReasoningCounter(MARKERS)
    for token in (1, 10, 11, 12, 2, 20, 21):
        counter.see(token)
    assert counter.tokens == 3


def test_a_prompt_that_opened_the_reasoning_counts_from_the_first_token() -> None:
    counter = ReasoningCounter(MARKERS, thinking=True)
    for token in (10, 11, 2, 20):
        counter.see(token)
    assert counter.tokens == 2


def test_a_model_without_markers_counts_nothing() -> None:
    counter = ReasoningCounter(None, thinking=False)
    for token in (1, 10, 2):
        counter.see(token)
    assert counter.tokens == 0
