import random
from collections.abc import Iterator

import pytest

from cirrus.errors import InputRefused, InvalidInput
from cirrus.guardrails import MAX_HOLD_BACK, InputGuard, OutputFilter, StreamRedactor
from cirrus.runtime.params import ChatMessage, GenerationInput, SamplingParams

LIMIT = 100
DENIED = ["secret\\s+plan", "project falcon"]


def guard() -> InputGuard:
    return InputGuard(LIMIT, DENIED)


def chat(*contents: str) -> GenerationInput:
    return GenerationInput(messages=tuple({"role": "user", "content": content} for content in contents))


def invalid(inputs: GenerationInput) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        guard().check(inputs)
    return caught.value


# Input: malformed text


def test_a_nul_in_the_prompt_is_refused_with_its_position() -> None:
    error = invalid(GenerationInput(prompt="abc\x00def"))
    assert error.param == "prompt"
    assert "NUL" in error.message and "index 3" in error.message


def test_a_nul_in_a_message_names_that_message() -> None:
    error = invalid(chat("fine", "also fine", "x\x00"))
    assert error.param == "messages[2].content"
    assert "'messages[2].content'" in error.message and "index 1" in error.message


@pytest.mark.parametrize(
    ("inputs", "where"),
    [
        (GenerationInput(prompt="ab\ud800"), "prompt"),
        (chat("ok", "\udfff tail"), "messages[1].content"),
        (
            GenerationInput(messages=({"role": "user", "content": "hi", "name": "n\ud83d"},)),
            "messages[0].name",
        ),
        (GenerationInput(prompt="hi", sampling=SamplingParams(stop=("ok", "\ud800"))), "stop[1]"),
    ],
)
def test_a_lone_surrogate_is_refused_wherever_it_is(inputs: GenerationInput, where: str) -> None:
    error = invalid(inputs)
    assert error.param == where
    assert "surrogate" in error.message and "UTF-8" in error.message


def test_the_surrogate_message_gives_the_code_point_and_position() -> None:
    assert "U+D800) at character index 2" in invalid(GenerationInput(prompt="ab\ud800")).message


def test_a_nul_in_a_stop_sequence_is_refused() -> None:
    assert invalid(GenerationInput(prompt="hi", sampling=SamplingParams(stop=("\x00",)))).param == "stop[0]"


def test_a_content_that_is_not_a_string_is_refused() -> None:
    message: ChatMessage = {"role": "user", "content": ["part"]}
    assert invalid(GenerationInput(messages=(message,))).param == "messages[0].content"


# Input: length


def test_a_prompt_exactly_at_the_limit_is_accepted() -> None:
    assert guard().check(GenerationInput(prompt="a" * LIMIT)).prompt == "a" * LIMIT


def test_a_prompt_one_character_over_the_limit_is_refused() -> None:
    error = invalid(GenerationInput(prompt="a" * (LIMIT + 1)))
    assert error.param == "prompt"
    assert str(LIMIT + 1) in error.message and str(LIMIT) in error.message


def test_messages_count_together_against_the_limit() -> None:
    assert guard().check(chat("a" * 60, "b" * 40)).messages is not None
    assert invalid(chat("a" * 60, "b" * 41)).param == "messages"


# Input: normalisation


def test_a_decomposed_e_acute_becomes_one_character() -> None:
    checked = guard().check(GenerationInput(prompt="cafe\u0301"))
    assert checked.prompt == "caf\u00e9"


def test_message_contents_are_normalised_and_everything_else_kept() -> None:
    sampling = SamplingParams(max_tokens=7, stop=("e\u0301",))
    inputs = GenerationInput(
        messages=({"role": "user", "content": "e\u0301", "name": "e\u0301"},), sampling=sampling
    )
    checked = guard().check(inputs)
    assert checked.messages == ({"role": "user", "content": "\u00e9", "name": "e\u0301"},)
    assert checked.sampling == sampling
    assert inputs.messages is not None and inputs.messages[0]["content"] == "e\u0301"


def test_a_message_without_content_passes_unchanged() -> None:
    message: ChatMessage = {"role": "assistant", "content": None}
    assert guard().check(GenerationInput(messages=(message, {"role": "user", "content": "x"}))).messages == (
        message,
        {"role": "user", "content": "x"},
    )


# Input: deny patterns


@pytest.mark.parametrize("text", ["Tell me the SECRET   Plan now", "about Project Falcon"])
def test_a_deny_pattern_refuses_the_input_without_echoing_it(text: str) -> None:
    with pytest.raises(InputRefused) as caught:
        guard().check(chat("hello", text))
    message = caught.value.message.lower()
    assert "guardrail policy" in message
    assert caught.value.param == "messages[1].content"
    for secret in ("secret", "plan", "falcon", "\\s"):
        assert secret not in message


def test_input_that_matches_no_deny_pattern_passes() -> None:
    assert (
        guard().check(GenerationInput(prompt="a secret recipe, a plan")).prompt == "a secret recipe, a plan"
    )


def test_deny_patterns_see_the_normalised_text() -> None:
    with pytest.raises(InputRefused):
        InputGuard(LIMIT, ["caf\u00e9"]).check(GenerationInput(prompt="CAFE\u0301"))


@pytest.mark.parametrize("pattern", ["(unclosed", "a**", "x*"])
def test_a_bad_deny_pattern_fails_at_construction_naming_it(pattern: str) -> None:
    with pytest.raises(ValueError, match="invalid deny pattern") as caught:
        InputGuard(LIMIT, ["fine", pattern])
    assert repr(pattern) in str(caught.value)


def test_one_string_is_not_taken_for_a_list_of_patterns() -> None:
    with pytest.raises(TypeError):
        InputGuard(LIMIT, "abc")


# Output: redaction


def redact(text: str) -> str:
    return OutputFilter(["email", "phone", "card"]).apply(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("write to john.doe@example.com.", "write to [email redacted]."),
        ("<a+tag@mail.co.uk>, x_y@sub.example.org", "<[email redacted]>, [email redacted]"),
        ("José@correo.es", "[email redacted]"),
        ("user@localhost and @handle and a@b", "user@localhost and @handle and a@b"),
    ],
)
def test_email_addresses(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    "phone",
    [
        "+1 (555) 123-4567",
        "+44 20 7946 0958",
        "+15551234567",
        "+33 6 12 34 56 78",
        "(555) 123-4567",
        "555-123-4567",
        "555.123.4567",
        "555 123 4567",
        "555-1234",
        "020 7946 0958",
        "030 123 4567",
        "06 12 34 56 78",
    ],
)
def test_phone_numbers_in_common_formats(phone: str) -> None:
    assert redact(f"Call {phone}, please.") == "Call [phone redacted], please."


@pytest.mark.parametrize(
    "text",
    [
        "In 2024 and 1999-2001, on 2024-01-15 at 10:30",
        "It costs $1,299.99, €555-1234 or 1.234.567 units",
        "Python 3.11.2 on 192.168.1.1, call 911, room 42",
        "order 5551234567 and +1 2 3",
        "555-123-4567-8901 and 555 1234 5678 and abc555-1234",
    ],
)
def test_numbers_that_are_not_phones_are_untouched(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize(
    "card", ["4111 1111 1111 1111", "4111-1111-1111-1111", "5500000000000004", "3782 822463 10005"]
)
def test_card_numbers_that_pass_luhn(card: str) -> None:
    assert redact(f"card {card}.") == "card [card redacted]."


@pytest.mark.parametrize("card", ["4111 1111 1111 1112", "5500000000000005", "4111 1111 1111 1111 1111 1"])
def test_card_like_numbers_that_fail_luhn_or_are_too_long_are_untouched(card: str) -> None:
    assert redact(f"card {card}.") == f"card {card}."


def test_output_deny_patterns_are_redacted_case_insensitively() -> None:
    assert (
        OutputFilter([], ["project\\s+falcon"]).apply("About PROJECT  Falcon: no.") == "About [redacted]: no."
    )


def test_filters_apply_only_when_named() -> None:
    text = "a@b.com 555-123-4567"
    assert OutputFilter(["phone"]).apply(text) == "a@b.com [phone redacted]"


@pytest.mark.parametrize(("names", "patterns"), [(["ssn"], []), ([], ["(x"]), ([], [".*"])])
def test_bad_output_configuration_fails_at_construction(names: list[str], patterns: list[str]) -> None:
    with pytest.raises(ValueError):
        OutputFilter(names, patterns)


def test_a_filter_without_rules_passes_text_through_unbuffered() -> None:
    empty = OutputFilter()
    assert not empty.enabled
    text = "mail a@b.com"
    assert empty.apply(text) is text
    redactor = empty.stream()
    assert redactor.feed("a@b") == "a@b" and redactor.held == 0
    assert redactor.flush() == ""


# Output: streaming is redaction of the whole


STREAM_FILTERS = [
    OutputFilter(["email", "phone", "card"]),
    OutputFilter(["email", "phone", "card"], ["secret\\s+\\w+", "\\bfalcon\\b", "x.*y", "(?<=ab)c"]),
]
TEXTS = [
    "Mail jo.e@ex.com, call +44 20 7946 0958 or 555-1234; card 4111-1111-1111-1111.",
    "Year 2024, $12.99, 555-123-4567-8 and a@b.c0m, (555) 123-4567.",
    "4111 1111 1111 1112 then 5500000000000004 and 06 12 34 56 78 end",
    "the SECRET sauce, Falcons, falcon. x marks y; abc; mail@host.org.",
]


def splits(text: str, ways: int) -> Iterator[list[str]]:
    """Every split of text into `ways` pieces (pieces may be empty)."""
    if ways == 1:
        yield [text]
        return
    for cut in range(len(text) + 1):
        for rest in splits(text[cut:], ways - 1):
            yield [text[:cut], *rest]


def streamed(output: OutputFilter, pieces: list[str]) -> str:
    redactor = output.stream()
    return "".join(redactor.feed(piece) for piece in pieces) + redactor.flush()


@pytest.mark.parametrize("output", STREAM_FILTERS)
@pytest.mark.parametrize("text", TEXTS)
def test_every_two_and_three_way_split_streams_to_the_whole_answer(output: OutputFilter, text: str) -> None:
    whole = output.apply(text)
    assert whole != text
    for ways in (2, 3):
        for pieces in splits(text, ways):
            assert streamed(output, pieces) == whole, pieces


@pytest.mark.parametrize("output", STREAM_FILTERS)
def test_random_many_way_splits_stream_to_the_whole_answer(output: OutputFilter) -> None:
    rng = random.Random(20240615)
    tokens = [
        *"ab .-+()0123456789xy@",
        "a" * 70,
        "1" * 30,
        "secret ",
        "@example.com",
        "+1 ",
        "4111 1111 1111 1111",
    ]
    for _ in range(150):
        text = "".join(rng.choice(tokens) for _ in range(rng.randint(0, 40)))
        cuts = sorted(rng.randint(0, len(text)) for _ in range(rng.randint(0, 20)))
        pieces = [text[start:end] for start, end in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        assert streamed(output, pieces) == output.apply(text), pieces
        assert streamed(output, list(text)) == output.apply(text)


# Output: hold-back


def held_after_each_character(redactor: StreamRedactor, text: str) -> list[int]:
    held = []
    for char in text:
        redactor.feed(char)
        held.append(redactor.held)
    return held


@pytest.mark.parametrize("output", STREAM_FILTERS)
@pytest.mark.parametrize("text", ["1" * 500, "a" * 500, "x" + "z" * 500, "4111 " * 100])
def test_the_hold_back_is_bounded(output: OutputFilter, text: str) -> None:
    assert max(held_after_each_character(output.stream(), text)) <= MAX_HOLD_BACK


def test_prose_is_held_back_only_from_where_a_match_could_start() -> None:
    redactor = OutputFilter(["email", "phone", "card"]).stream()
    assert redactor.feed("Hello there, how are") == "Hello there, how "
    assert redactor.feed(" you? Mail jo") == "are you? Mail "
    assert redactor.feed("@x.io today") == "[email redacted] "
    assert redactor.flush() == "today"


def test_an_address_too_long_to_decide_early_loses_only_its_start() -> None:
    assert redact("x" * 70 + "@example.com ok") == "x" * 20 + "[email redacted] ok"


def test_named_texts_are_checked_each_on_its_own_and_named_in_errors() -> None:
    guard = InputGuard(10, ["secret"])
    assert guard.check_texts([("input[0]", "cafe\u0301"), ("input[1]", "ok")]) == ["caf\u00e9", "ok"]
    with pytest.raises(InvalidInput, match=r"'input\[1\]'"):
        guard.check_texts([("input[0]", "fine"), ("input[1]", "nul\x00")])
    with pytest.raises(InvalidInput, match=r"'text\[0\]' is too long: 11 characters"):
        guard.check_texts([("text[0]", "x" * 11)])
    with pytest.raises(InputRefused) as refused:
        guard.check_texts([("text[0]", "a SECRET")])
    assert refused.value.param == "text[0]" and "secret" not in refused.value.message.lower()
