"""A progress bar per pack step: the output file's growth against its expected size."""

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from tqdm import tqdm  # type: ignore[import-untyped]

T = TypeVar("T")
POLL_S = 0.2


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def watch_output(label: str, output: Path, expected_bytes: int, step: Callable[[], T], show: bool) -> T:
    """Run `step` in a thread while a bar follows `output`'s size; return what it returns, or raise its error."""
    outcome: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(step())
        except BaseException as exc:
            failure.append(exc)

    worker = threading.Thread(target=run, name=f"pack-{label}", daemon=True)
    with tqdm(
        total=expected_bytes, desc=label, unit="B", unit_scale=True, disable=not show, leave=True
    ) as bar:
        worker.start()
        while worker.is_alive():
            worker.join(POLL_S)
            bar.update(max(0, _size(output) - bar.n))
        if not failure:
            bar.total = bar.n = _size(output)
            bar.refresh()
    if failure:
        raise failure[0]
    return outcome[0]
