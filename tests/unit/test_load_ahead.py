"""What a cold start prepares while llama.cpp loads the model: the compiled chat template and the prefix cache an
earlier instance left on disk."""

import os
from pathlib import Path

from cirrus.runtime.disk_tier import write_snapshot
from cirrus.runtime.load_ahead import LoadAhead

TEMPLATE = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{{ eos_token }}{% endfor %}"


def tokens(seed: int) -> list[int]:
    return [1000 * seed + index for index in range(40)]


def test_the_template_is_compiled_and_every_state_read_while_the_model_loads(tmp_path: Path) -> None:
    write_snapshot(tmp_path, [(tokens(1), None, b"one"), (tokens(2), "adapter", b"two")])
    ahead = LoadAhead(TEMPLATE, tmp_path).start()
    ahead._thread.join()  # type: ignore[union-attr]  # a load slower than the reading
    ahead.model_loaded()
    assert ahead.formatter is not None and ahead.formatter.template == TEMPLATE
    ahead.formatter.eos_token = "</s>"
    rendered = ahead.formatter(messages=[{"role": "user", "content": "hi"}])
    assert rendered.prompt == "<user>hi</s>"
    assert ahead.stored is not None and sorted(str(s.salt) for s in ahead.stored) == ["None", "adapter"]
    assert sorted(ahead.states.values()) == [b"one", b"two"]


def test_states_are_read_newest_first_and_none_once_the_model_is_loaded(tmp_path: Path) -> None:
    write_snapshot(tmp_path, [(tokens(1), None, b"old")])
    write_snapshot(tmp_path, [(tokens(2), None, b"new")])
    [old] = [path for path in tmp_path.glob("*.kv") if path.read_bytes().endswith(b"old")]
    os.utime(old, (1_000, 1_000))
    order: list[bytes] = []
    ahead = LoadAhead(None, tmp_path)
    ahead.states = _Recording(order)
    ahead.start()._thread.join()  # type: ignore[union-attr]
    assert order == [b"new", b"old"]

    loaded_first = LoadAhead(None, tmp_path)
    loaded_first.model_loaded()
    loaded_first.start()._thread.join()  # type: ignore[union-attr]
    assert loaded_first.stored is not None and len(loaded_first.stored) == 2
    assert loaded_first.states == {}  # the rest is read when a prompt matches it


def test_a_broken_template_or_a_missing_folder_leaves_the_work_to_the_main_path(tmp_path: Path) -> None:
    ahead = LoadAhead("{% for %}", tmp_path / "missing").start()
    ahead._thread.join()  # type: ignore[union-attr]
    ahead.model_loaded()
    assert ahead.formatter is None and ahead.stored == [] and ahead.states == {}


class _Recording(dict[Path, bytes]):
    def __init__(self, order: list[bytes]) -> None:
        super().__init__()
        self._order = order

    def __setitem__(self, key: Path, value: bytes) -> None:
        self._order.append(value)
        super().__setitem__(key, value)
