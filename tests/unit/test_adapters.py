"""The instance's loaded LoRA adapters: loaded once, kept by LRU, never freed while a sequence runs with one."""

from cirrus.runtime.adapters import Adapters, AdapterTurns


class Loader:
    def __init__(self) -> None:
        self.loads: list[str] = []
        self.freed: list[str] = []

    def load(self, path: str) -> str:
        self.loads.append(path)
        return f"handle:{path}"

    def free(self, handle: str) -> None:
        self.freed.append(handle.removeprefix("handle:"))


def test_an_adapter_is_loaded_once_and_then_reused() -> None:
    loader = Loader()
    adapters = Adapters(loader.load, loader.free, capacity=2)
    assert adapters.handle("a") == "handle:a"
    assert adapters.handle("a") == "handle:a"
    assert loader.loads == ["a"]


def test_past_capacity_the_least_recently_used_adapter_is_freed() -> None:
    loader = Loader()
    adapters = Adapters(loader.load, loader.free, capacity=2)
    adapters.handle("a")
    adapters.handle("b")
    adapters.handle("a")  # b is now the least recently used
    adapters.handle("c")
    assert loader.freed == ["b"]
    assert "a" in adapters and "c" in adapters and len(adapters) == 2


def test_an_adapter_in_use_is_never_freed_even_past_capacity() -> None:
    loader = Loader()
    adapters = Adapters(loader.load, loader.free, capacity=1)
    adapters.handle("a")
    adapters.handle("b", in_use={"a"})
    assert loader.freed == []
    assert len(adapters) == 2
    adapters.handle("c", in_use={"b"})  # a is free again: it goes, b stays
    assert loader.freed == ["a"]
    assert "b" in adapters and "c" in adapters


def turns(sequences: list[tuple[str | None, bool]], steps: int) -> list[str | None]:
    """The adapters of `steps` consecutive steps over the same running sequences."""
    rotation, chosen = AdapterTurns(), []
    for _ in range(steps):
        adapter = rotation.choose(sequences)
        assert rotation.choose(sequences) == adapter  # choosing again (a step planned again) keeps the turn
        rotation.taken(adapter, batch_only=all(bg for a, bg in sequences if a == adapter))
        chosen.append(adapter)
    return chosen


def test_adapters_take_turns_in_a_fixed_order_and_none_starves() -> None:
    sequences = [("b", False), (None, False), ("a", False), ("b", False)]
    assert turns(sequences, 6) == [None, "a", "b", None, "a", "b"]


def test_one_group_decodes_every_step() -> None:
    assert turns([("a", False), ("a", True)], 3) == ["a", "a", "a"]
    assert AdapterTurns().choose([]) is None


def test_batch_work_alone_in_its_groups_shares_one_turn_per_round() -> None:
    sequences = [(None, False), ("a", True), ("b", True), ("c", True), ("d", True)]
    assert turns(sequences, 8) == [None, "a", None, "b", None, "c", None, "d"]
    two_interactive = [(None, False), ("x", False), ("a", True), ("b", True)]
    assert turns(two_interactive, 6) == [None, "x", "a", None, "x", "b"]
    assert turns([("a", True), ("b", True)], 3) == ["a", "b", "a"]  # batch work alone: plain turns
