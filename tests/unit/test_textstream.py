from cirrus.runtime.textstream import StopMatcher, Utf8Assembler


def feed_all(matcher: StopMatcher, pieces: list[str]) -> str:
    return "".join(matcher.feed(piece) for piece in pieces) + matcher.flush()


def test_text_without_stop_sequences_passes_through() -> None:
    assert feed_all(StopMatcher(()), ["a", "b", "c"]) == "abc"


def test_a_stop_sequence_split_across_pieces_is_caught_and_dropped() -> None:
    matcher = StopMatcher(("STOP",))
    assert feed_all(matcher, ["hello S", "TO", "P and more"]) == "hello "
    assert matcher.stopped


def test_a_partial_match_that_does_not_complete_is_released() -> None:
    matcher = StopMatcher(("STOP",))
    assert matcher.feed("ST") == ""
    assert matcher.feed("ay") == "STay"
    assert not matcher.stopped and matcher.matched is None


def test_the_earliest_of_several_stop_sequences_wins_and_is_reported() -> None:
    matcher = StopMatcher(("world", "lo"))
    assert feed_all(matcher, ["hello world"]) == "hel"
    assert matcher.matched == "lo"


def test_of_two_stops_found_at_one_place_the_longer_is_reported() -> None:
    matcher = StopMatcher(("##", "###"))
    assert feed_all(matcher, ["a ###"]) == "a "
    assert matcher.matched == "###"


def test_held_text_is_flushed_at_the_end() -> None:
    matcher = StopMatcher(("END",))
    assert matcher.feed("abcE") == "abc"
    assert matcher.flush() == "E"


def test_a_multibyte_character_split_across_tokens_is_emitted_whole() -> None:
    utf8 = Utf8Assembler()
    encoded = "é€".encode()
    assert utf8.feed(encoded[:1]) == ""
    assert utf8.feed(encoded[1:3]) == "é"
    assert utf8.feed(encoded[3:]) == "€"
    assert utf8.flush() == ""


def test_invalid_bytes_become_replacement_characters_not_errors() -> None:
    utf8 = Utf8Assembler()
    assert utf8.feed(b"\xff") == "\ufffd"
