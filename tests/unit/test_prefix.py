from cirrus.pool.affinity import AffinityTable
from cirrus.runtime.prefix import Placement, common_prefix, place


def test_common_prefix_counts_leading_equal_tokens() -> None:
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([], [1]) == 0
    assert common_prefix([5, 6], [5, 6, 7]) == 2


def test_a_free_slot_that_holds_the_prefix_is_reused_in_place() -> None:
    cached = {0: [9, 9], 1: [1, 2, 3, 4]}
    assert place([1, 2, 3, 5], free=[0, 1], cached=cached, last_used={}) == Placement(slot=1, reuse=3)


def test_a_busy_slots_prefix_is_shared_into_a_free_slot() -> None:
    cached = {0: [], 1: [1, 2, 3, 4, 5]}
    assert place([1, 2, 3, 4, 9], free=[0], cached=cached, last_used={}) == Placement(
        slot=0, reuse=4, source=1
    )


def test_one_prompt_token_is_always_left_to_evaluate() -> None:
    cached = {0: [1, 2, 3]}
    assert place([1, 2, 3], free=[0], cached=cached, last_used={}).reuse == 2


def test_without_any_match_the_least_recently_used_free_slot_is_taken() -> None:
    cached = {0: [7], 1: [8], 2: [9]}
    placement = place([1, 2], free=[0, 1, 2], cached=cached, last_used={0: 30.0, 1: 10.0, 2: 20.0})
    assert placement == Placement(slot=1, reuse=0)


def test_the_affinity_table_forgets_the_oldest_session_first() -> None:
    table = AffinityTable(capacity=2)
    table.remember("a", "inst-1")
    table.remember("b", "inst-2")
    assert table.get("a") == "inst-1"
    table.remember("c", "inst-3")
    assert table.get("b") is None and table.get("a") == "inst-1" and table.get("c") == "inst-3"
