"""The instance's loaded LoRA adapters: loaded once, kept by LRU, never freed while a sequence runs with one."""

from cirrus.runtime.adapters import Adapters


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
