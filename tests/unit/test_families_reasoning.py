import itertools

import pytest

from cirrus.families.reasoning import ReasoningDelta, ReasoningSplitter, split_reasoning


def stream(text: str, cuts: list[int], starts_in_reasoning: bool = False) -> ReasoningDelta:
    splitter = ReasoningSplitter("<think>", "</think>", starts_in_reasoning)
    bounds = [0, *cuts, len(text)]
    total = ReasoningDelta()
    for start, end in itertools.pairwise(bounds):
        total = total + splitter.feed(text[start:end])
    return total + splitter.finish()


CASES = [
    ("\n<think>Add them.</think>\nFour.", False, ReasoningDelta("Add them.", "Four.")),
    ("Add them.</think>Four.", True, ReasoningDelta("Add them.", "Four.")),
    ("<think>Add them.</think>Four.", True, ReasoningDelta("Add them.", "Four.")),  # repeated opening
    ("Four.", False, ReasoningDelta("", "Four.")),
    ("Four. <think>x</think>", False, ReasoningDelta("", "Four. <think>x</think>")),  # only at the start
    ("<think>cut off by the length limi", False, ReasoningDelta("cut off by the length limi", "")),
    ("still thinking </thi", True, ReasoningDelta("still thinking </thi", "")),
    ("a < b</think>so <think", True, ReasoningDelta("a < b", "so <think")),
    ("<thinking>no</thinking>", False, ReasoningDelta("", "<thinking>no</thinking>")),
    ("", True, ReasoningDelta("", "")),
]


@pytest.mark.parametrize(("text", "starts_inside", "expected"), CASES)
def test_whole_text(text: str, starts_inside: bool, expected: ReasoningDelta) -> None:
    assert split_reasoning(text, "<think>", "</think>", starts_inside) == expected


@pytest.mark.parametrize(("text", "starts_inside", "expected"), CASES)
def test_every_two_way_and_three_way_split_gives_the_whole_text_result(
    text: str, starts_inside: bool, expected: ReasoningDelta
) -> None:
    for first in range(len(text) + 1):
        assert stream(text, [first], starts_inside) == expected, first
        for second in range(first, len(text) + 1, 3):
            assert stream(text, [first, second], starts_inside) == expected, (first, second)


def test_one_character_at_a_time_streams_reasoning_before_the_close_arrives() -> None:
    splitter = ReasoningSplitter("<think>", "</think>", starts_in_reasoning=True)
    seen = [splitter.feed(ch) for ch in "abc</"]
    assert "".join(d.reasoning for d in seen) == "abc"  # "</" is held: it may begin </think>
    assert splitter.feed("think>ok") == ReasoningDelta("", "ok")
