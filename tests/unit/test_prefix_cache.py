"""The prefix cache's bookkeeping, over fake KV cells that hold each sequence's tokens as a list."""

import json
from pathlib import Path

import pytest

from cirrus.pool.affinity import AffinityTable
from cirrus.runtime.disk_tier import read_index, read_state, write_snapshot
from cirrus.runtime.host_tier import MIN_TOKENS, HostTier, State
from cirrus.runtime.prefix_cache import PrefixCache, sequence_ids
from cirrus.runtime.prefix_index import BLOCK, PrefixIndex


class FakeCells:
    """Sequence id -> the tokens its cells hold; `room` False makes every restore fail (a full KV cache),
    `saveable` False every save (the engine could not serialise the cells)."""

    def __init__(self) -> None:
        self.held: dict[int, list[int]] = {}
        self.room = True
        self.saveable = True
        self.saves = 0
        self.events: list[str] = []  # "dropped N" and "restored N", in order

    def forget(self, sequence: int, keep: int) -> None:
        del self.held.setdefault(sequence, [])[keep:]
        if keep == 0:
            self.events.append(f"dropped {sequence}")

    def share(self, source: int, target: int, length: int) -> None:
        assert not self.held.get(target), "sharing into a sequence that still holds cells"
        self.held[target] = self.held[source][:length]

    def save(self, sequence: int) -> State | None:
        self.saves += 1
        return bytearray(json.dumps(self.held[sequence]).encode()) if self.saveable else None

    def restore(self, sequence: int, state: State) -> bool:
        """Like llama.cpp: the destination is cleared first, and a failed restore may leave cells behind."""
        if not self.room:
            self.held[sequence] = [-1]
            return False
        self.held[sequence] = json.loads(state)
        self.events.append(f"restored {sequence}")
        return True


def run(cache: PrefixCache, cells: FakeCells, prompt: list[int], answer: list[int]) -> tuple[int, int]:
    """Admit prompt, feed what is left of it and an answer, end it; (slot, reused tokens)."""
    admission = cache.admit(prompt)
    assert cells.held.get(admission.slot, []) == prompt[: admission.reuse]
    fed = prompt[admission.reuse :] + answer
    cells.held.setdefault(admission.slot, []).extend(fed)
    cache.extend(admission.slot, fed)
    assert cache.tokens(admission.slot) == cells.held[admission.slot]
    cache.release(admission.slot)
    return admission.slot, admission.reuse


def conversation(seed: int, length: int) -> list[int]:
    return [1000 * seed + index for index in range(length)]


SYSTEM = list(range(24))


def test_the_index_finds_the_longest_shared_prefix_including_a_partial_last_block() -> None:
    index: PrefixIndex[str] = PrefixIndex()
    index.put("a", list(range(40)))
    index.put("b", list(range(20)) + [99] * 30)
    match = index.longest(list(range(45)))
    assert match is not None and (match.key, match.length) == ("a", 40)
    match = index.longest([*list(range(20)), 99, 99, 7])
    assert match is not None and (match.key, match.length) == ("b", 22)
    assert index.longest([5, 6, 7]) is None


def test_the_index_forgets_truncated_and_removed_tokens() -> None:
    index: PrefixIndex[int] = PrefixIndex()
    index.put(1, list(range(3 * BLOCK)))
    index.truncate(1, BLOCK + 3)
    match = index.longest(list(range(3 * BLOCK)))
    assert match is not None and match.length == BLOCK + 3
    index.remove(1)
    assert index.longest(list(range(3 * BLOCK))) is None and len(index) == 0


def test_sequences_under_different_salts_never_match() -> None:
    index: PrefixIndex[int] = PrefixIndex()
    index.put(1, list(range(50)), salt="adapter-a")
    assert index.longest(list(range(50)), salt="adapter-b") is None
    assert index.longest(list(range(50)), salt=None) is None
    match = index.longest(list(range(50)), salt="adapter-a")
    assert match is not None and match.length == 50


def test_a_conversations_next_turn_adopts_its_last_turn_cells_whole() -> None:
    cells = FakeCells()
    cache = PrefixCache(cells, 6)
    turn_1 = SYSTEM + conversation(1, 30)
    slot, reuse = run(cache, cells, turn_1, answer=[7, 8, 9])
    assert reuse == 0
    turn_2 = [*turn_1, 7, 8, 9, *conversation(2, 10)]
    again, reuse = run(cache, cells, turn_2, answer=[5])
    assert (again, reuse) == (slot, len(turn_1) + 3)


def test_a_sequence_the_engine_cannot_save_is_dropped_not_kept_in_the_host_tier() -> None:
    cells, host = FakeCells(), HostTier(capacity_tokens=10_000)
    cache = PrefixCache(cells, 2, host)
    cells.saveable = False
    for n in range(3):
        run(cache, cells, SYSTEM + conversation(n + 1, 40), answer=[n])
    assert len(host) == 0 and cells.saves > 0
    assert list(cache.snapshot()) == []


def test_every_conversation_that_fits_stays_cached_not_only_the_shared_system_prompt() -> None:
    cells = FakeCells()
    cache = PrefixCache(cells, sequence_ids(4))
    histories = {n: SYSTEM + conversation(n + 1, 20) for n in range(8)}
    for n, history in histories.items():
        run(cache, cells, history, answer=[n])
        histories[n] = [*history, n]
    for n, history in histories.items():
        _, reuse = run(cache, cells, [*history, 555], answer=[])
        assert reuse == len(history), f"conversation {n} re-evaluated its earlier turns"


def test_a_running_sequences_prefix_is_shared_into_another_id() -> None:
    cells = FakeCells()
    cache = PrefixCache(cells, 4)
    first = cache.admit([*SYSTEM, 1, 2, 3])
    cells.held[first.slot] = [*SYSTEM, 1, 2, 3]
    cache.extend(first.slot, [*SYSTEM, 1, 2, 3])
    second = cache.admit([*SYSTEM, 4, 5])
    assert second.slot != first.slot and second.reuse == len(SYSTEM)
    assert cells.held[second.slot] == SYSTEM and cells.held[first.slot] == [*SYSTEM, 1, 2, 3]


def test_one_prompt_token_is_always_left_to_evaluate() -> None:
    cells = FakeCells()
    cache = PrefixCache(cells, 3)
    run(cache, cells, SYSTEM, answer=[])
    _, reuse = run(cache, cells, SYSTEM, answer=[])
    assert reuse == len(SYSTEM) - 1


def test_a_diverging_prompt_copies_the_prefix_and_keeps_the_other_branch() -> None:
    cells = FakeCells()
    cache = PrefixCache(cells, 4)
    slot, _ = run(cache, cells, [*SYSTEM, 1, 2, 3], answer=[4])
    other, reuse = run(cache, cells, [*SYSTEM, 9, 9], answer=[])
    assert other != slot and reuse == len(SYSTEM)
    _, reuse = run(cache, cells, [*SYSTEM, 1, 2, 3, 4, 6], answer=[])
    assert reuse == len(SYSTEM) + 4


def test_the_least_recently_used_idle_sequence_is_evicted_to_the_host_tier_and_restored() -> None:
    cells, host = FakeCells(), HostTier(capacity_tokens=10_000)
    cache = PrefixCache(cells, 3, host)
    long_turns = [conversation(n + 1, MIN_TOKENS + 10) for n in range(4)]
    for turn in long_turns:
        run(cache, cells, turn, answer=[1])
    assert len(host) == 1 and cells.saves == 1  # 3 ids: the oldest conversation was saved, then evicted
    slot, reuse = run(cache, cells, long_turns[0] + [1, 2], answer=[])
    assert reuse == len(long_turns[0]) + 1
    assert cells.held[slot][:reuse] == long_turns[0] + [1]


def test_short_sequences_are_not_worth_the_host_tier() -> None:
    cells, host = FakeCells(), HostTier(capacity_tokens=10_000)
    cache = PrefixCache(cells, 3, host)
    for n in range(5):
        run(cache, cells, conversation(n + 1, MIN_TOKENS - 5), answer=[])
    assert len(host) == 0 and cells.saves == 0


def test_the_host_tier_keeps_its_token_budget_oldest_first() -> None:
    host = HostTier(capacity_tokens=100)
    for n in range(4):
        host.put(conversation(n + 1, 40), None, b"state")
    assert host.tokens_held <= 100 and len(host) == 2
    assert host.longest(conversation(1, 40), None) is None
    kept = host.longest(conversation(4, 40), None)
    assert kept is not None and kept.length == 40


def test_the_host_tier_drops_an_entry_that_a_longer_one_extends() -> None:
    host = HostTier(capacity_tokens=1_000)
    host.put(conversation(1, 40), None, b"turn 1")
    host.put(conversation(1, 80), None, b"turn 2")
    assert len(host) == 1 and host.tokens_held == 80
    assert not host.worth_keeping(conversation(1, 60), None)


def test_a_restore_that_finds_no_room_evaluates_instead_and_drops_the_entry() -> None:
    cells, host = FakeCells(), HostTier(capacity_tokens=10_000)
    host.put(conversation(1, 64), None, json.dumps(conversation(1, 64)).encode())
    cache = PrefixCache(cells, 3, host)
    cells.room = False
    slot, reuse = run(cache, cells, [*conversation(1, 64), 5], answer=[])
    assert reuse == 0 and len(host) == 0
    assert cells.held[slot] == [*conversation(1, 64), 5]  # no cells of the failed restore were left behind


def test_a_failed_restore_never_leaves_a_prompt_sharing_from_an_evicted_sequence() -> None:
    cells, host = FakeCells(), HostTier(capacity_tokens=10_000)
    cache = PrefixCache(cells, 4, host)
    run(cache, cells, [*SYSTEM, *conversation(9, 10)], answer=[])
    host.put([*SYSTEM, *conversation(1, 60)], None, json.dumps([*SYSTEM, *conversation(1, 60)]).encode())
    cells.room = False
    _, reuse = run(cache, cells, [*SYSTEM, *conversation(1, 60), 5], answer=[])
    assert reuse == 0  # the idle sequence went to the host tier to make room; run() checks the cells held


def test_a_partial_match_in_the_host_tier_restores_the_entry_whole_and_keeps_it() -> None:
    cells, host = FakeCells(), HostTier(capacity_tokens=10_000)
    long_history = [*SYSTEM, *conversation(1, 200)]
    host.put(long_history, None, json.dumps(long_history).encode())
    cache = PrefixCache(cells, 4, host)
    _, reuse = run(cache, cells, [*SYSTEM, *conversation(2, 20)], answer=[])
    assert reuse == len(SYSTEM)
    _, reuse = run(cache, cells, [*long_history, 5], answer=[])
    assert reuse == len(long_history)


def test_a_full_kv_cache_evicts_idle_sequences_oldest_first() -> None:
    cells = FakeCells()
    cache = PrefixCache(cells, 4)
    first, _ = run(cache, cells, [*SYSTEM, 1], answer=[])
    second, _ = run(cache, cells, [50, 51, 52], answer=[])
    assert cache.evict_one() and cells.held[first] == [] and cells.held[second] == [50, 51, 52]
    assert cache.evict_one() and not cache.evict_one()


@pytest.mark.parametrize("parallel", [1, 4, 64])
def test_a_context_has_room_for_idle_sequences_within_llama_cpps_limit(parallel: int) -> None:
    assert parallel + 2 <= sequence_ids(parallel) <= 256


def test_the_affinity_table_forgets_the_oldest_session_first() -> None:
    table = AffinityTable(capacity=2)
    table.remember("a", "inst-1")
    table.remember("b", "inst-2")
    assert table.get("a") == "inst-1"
    table.remember("c", "inst-3")
    assert table.get("b") is None and table.get("a") == "inst-1" and table.get("c") == "inst-3"


def test_a_snapshot_holds_idle_sequences_then_host_entries_newest_first_within_the_budget() -> None:
    cells, host = FakeCells(), HostTier(capacity_tokens=100)
    cache = PrefixCache(cells, 3, host)
    for n in range(4):  # the oldest goes to the host tier
        run(cache, cells, conversation(n + 1, 40), answer=[])
    held = [saved.tokens[0] for saved in cache.snapshot()]
    assert held == [4000, 3000]  # 40 + 40 tokens fit the 100-token budget; the third would not
    assert len(host) == 1


def test_what_one_instance_keeps_on_disk_the_next_one_restores(tmp_path: Path) -> None:
    cells, host = FakeCells(), HostTier(capacity_tokens=1_000)
    cache = PrefixCache(cells, 3, host)
    turn = conversation(1, 50)
    run(cache, cells, turn, answer=[7])
    assert write_snapshot(tmp_path, ((s.tokens, s.salt, s.state) for s in cache.snapshot())) == 1

    later_cells, later_host = FakeCells(), HostTier(capacity_tokens=1_000)
    for stored in read_index(tmp_path):
        later_host.put(stored.tokens, stored.salt, stored.path)
    later = PrefixCache(later_cells, 3, later_host)
    admission = later.admit([*turn, 7, 8, 9])
    assert admission.restored and admission.reuse == len(turn) + 1
    assert later_cells.held[admission.slot] == [*turn, 7]


def test_a_snapshot_replaces_what_its_instance_read_and_leaves_other_instances_entries(
    tmp_path: Path,
) -> None:
    first, second, other = conversation(1, 40), conversation(2, 40), conversation(3, 40)
    write_snapshot(tmp_path, [(first, None, b"one"), (second, None, b"two")])
    read = read_index(tmp_path)
    write_snapshot(tmp_path, [(other, None, b"three")])  # another instance, which read nothing
    [kept] = [s for s in read if s.tokens == tuple(first)]
    write_snapshot(tmp_path, [(first, None, kept.path)], replaces=[s.path for s in read])
    assert sorted(s.tokens for s in read_index(tmp_path)) == sorted([tuple(first), tuple(other)])
    assert read_state(kept.path) == b"one"


def test_a_damaged_state_is_never_restored_and_abandoned_partial_files_go(tmp_path: Path) -> None:
    write_snapshot(tmp_path, [(conversation(1, 40), None, b"state")])
    [entry] = read_index(tmp_path)
    entry.path.write_bytes(entry.path.read_bytes()[:-1] + b"X")
    assert read_state(entry.path) is None
    abandoned = tmp_path / "x.kv.999999999.partial"
    abandoned.write_bytes(b"half")
    write_snapshot(tmp_path, [])
    assert not abandoned.exists()


def test_an_entry_another_instance_removed_is_evaluated_instead(tmp_path: Path) -> None:
    write_snapshot(tmp_path, [(conversation(1, 40), None, b"[]")])
    host = HostTier(capacity_tokens=1_000)
    for stored in read_index(tmp_path):
        host.put(stored.tokens, stored.salt, stored.path)
        stored.path.unlink()
    cells = FakeCells()
    admission = PrefixCache(cells, 3, host).admit([*conversation(1, 40), 1])
    assert admission.reuse == 0 and not admission.restored


def test_unreadable_entries_are_skipped(tmp_path: Path) -> None:
    write_snapshot(tmp_path, [(conversation(1, 40), None, b"state")])
    (tmp_path / "broken.kv").write_bytes(b"\x01")
    header = json.dumps({"tokens": "not a list", "salt": None}).encode()
    (tmp_path / "odd.kv").write_bytes(len(header).to_bytes(4, "little") + header)
    assert [len(s.tokens) for s in read_index(tmp_path)] == [40]
    assert read_index(tmp_path / "missing") == []


def test_idle_sequences_past_their_share_of_the_kv_cache_move_to_the_host_tier() -> None:
    cells, host = FakeCells(), HostTier(capacity_tokens=10_000)
    cache = PrefixCache(cells, 12, host, idle_tokens=100)
    for n in range(4):
        run(cache, cells, conversation(n + 1, 40), answer=[])
    assert cache.idle == 2 and len(host) == 2  # 2 x 40 idle tokens fit 100; the two oldest were saved
    _, reuse = run(cache, cells, [*conversation(1, 40), 5], answer=[])
    assert reuse == 40


def test_an_idle_conversation_leaves_the_kv_cache_before_another_ones_history_is_restored() -> None:
    cells, host = FakeCells(), HostTier(capacity_tokens=10_000)
    cache = PrefixCache(cells, 12, host, idle_tokens=100)
    first, second = conversation(1, 200), conversation(2, 200)
    run(cache, cells, first, answer=[])
    second_slot, _ = run(cache, cells, second, answer=[])  # the first moves to the host tier
    assert (
        cache.idle == 1
    )  # the one that just ended stays whole past the budget: its next turn may come first
    cells.events.clear()
    admission = cache.admit([*first, 7])
    assert admission.reuse == len(first) and admission.restored
    assert cells.events == [f"dropped {second_slot}", f"restored {admission.slot}"]
    # The second is in the host tier now, and so is the first still: were it to leave again, no save.
    assert cache.idle == 0 and len(host) == 2


def test_the_idle_conversation_a_prompt_continues_stays_whole() -> None:
    cells, host = FakeCells(), HostTier(capacity_tokens=10_000)
    cache = PrefixCache(cells, 12, host, idle_tokens=100)
    slot, _ = run(cache, cells, conversation(1, 200), answer=[])
    admission = cache.admit([*conversation(1, 200), 7])
    assert (admission.slot, admission.reuse, cells.saves) == (slot, 200, 0)


def test_an_idle_conversation_shared_from_for_its_system_prompt_leaves_once_shared() -> None:
    cells, host = FakeCells(), HostTier(capacity_tokens=10_000)
    cache = PrefixCache(cells, 12, host, idle_tokens=100)
    first, _ = run(cache, cells, [*SYSTEM, *conversation(1, 200)], answer=[])
    admission = cache.admit([*SYSTEM, *conversation(2, 50)])
    assert admission.reuse == len(SYSTEM) and cells.held[admission.slot] == SYSTEM
    assert cells.held[first] == [] and cache.idle == 0 and len(host) == 1


def test_idle_conversations_within_the_budget_stay_when_another_prompt_is_admitted() -> None:
    cells, host = FakeCells(), HostTier(capacity_tokens=10_000)
    cache = PrefixCache(cells, 12, host, idle_tokens=100)
    run(cache, cells, conversation(1, 40), answer=[])
    run(cache, cells, conversation(2, 40), answer=[])
    cache.admit(conversation(3, 40))
    assert cache.idle == 2 and cells.saves == 0


def test_an_idle_conversation_past_the_budget_is_saved_ahead_and_then_leaves_without_a_save() -> None:
    cells, host = FakeCells(), HostTier(capacity_tokens=10_000)
    cache = PrefixCache(cells, 12, host, idle_tokens=100)
    first = conversation(1, 200)
    first_slot, _ = run(cache, cells, first, answer=[])
    assert cache.save_ahead() and (cells.saves, len(host), cache.idle) == (1, 1, 1)
    assert not cache.save_ahead()  # the host tier holds it already
    cells.events.clear()
    cache.admit(conversation(2, 50))
    assert cells.saves == 1 and cells.events == [f"dropped {first_slot}"]
    admission = cache.admit([*first, 7])
    assert admission.reuse == len(first) and admission.restored


def test_a_conversation_saved_ahead_continues_in_place() -> None:
    cells, host = FakeCells(), HostTier(capacity_tokens=10_000)
    cache = PrefixCache(cells, 12, host, idle_tokens=100)
    slot, _ = run(cache, cells, conversation(1, 200), answer=[])
    assert cache.save_ahead()
    cells.events.clear()
    admission = cache.admit([*conversation(1, 200), 7])
    assert (admission.slot, admission.reuse, admission.restored, cells.events) == (slot, 200, False, [])


def test_nothing_is_saved_ahead_within_the_budget_or_without_a_host_tier() -> None:
    cells, host = FakeCells(), HostTier(capacity_tokens=10_000)
    cache = PrefixCache(cells, 12, host, idle_tokens=100)
    run(cache, cells, conversation(1, 40), answer=[])
    run(cache, cells, conversation(2, 40), answer=[])
    assert not cache.save_ahead() and cells.saves == 0
    bare_cells = FakeCells()
    bare = PrefixCache(bare_cells, 12)
    run(bare, bare_cells, conversation(3, 200), answer=[])
    assert not bare.save_ahead() and bare_cells.saves == 0


def test_a_snapshot_holds_a_conversation_saved_ahead_once_without_saving_it_again() -> None:
    cells, host = FakeCells(), HostTier(capacity_tokens=10_000)
    cache = PrefixCache(cells, 12, host, idle_tokens=100)
    run(cache, cells, conversation(1, 200), answer=[])
    assert cache.save_ahead()
    assert [len(saved.tokens) for saved in cache.snapshot()] == [200] and cells.saves == 1


def test_a_full_host_tier_keeps_the_entry_a_prompt_restores_while_idle_ones_move_in() -> None:
    """The idle sequences leave for the host tier before the restore; the entry the prompt needs, the tier's least
    recently used, is read before they can push it out."""
    cells, host = FakeCells(), HostTier(capacity_tokens=300)
    cache = PrefixCache(cells, 12, host, idle_tokens=100)
    first = conversation(1, 200)
    run(cache, cells, first, answer=[])
    run(cache, cells, conversation(2, 120), answer=[])  # the first moves to the host tier
    assert cache.idle == 1 and len(host) == 1
    admission = cache.admit([*first, 7])
    assert admission.reuse == len(first) and admission.restored


def test_an_unreadable_host_entry_leaves_the_prompt_its_resident_prefix(tmp_path: Path) -> None:
    cells, host = FakeCells(), HostTier(capacity_tokens=10_000)
    cache = PrefixCache(cells, 12, host, idle_tokens=100)
    history = conversation(1, 200)
    run(cache, cells, history, answer=[])
    host.put([*history, *conversation(9, 64)], None, tmp_path / "removed-by-another-instance.kv")
    admission = cache.admit([*history, *conversation(9, 64), 7])
    assert (admission.reuse, admission.restored, len(host)) == (200, False, 0)
