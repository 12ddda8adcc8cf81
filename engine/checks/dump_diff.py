"""Walks two JSON values side by side and reports where they differ (for vocabulary.py's compare)."""

from dataclasses import dataclass

SHOWN = 30  # differences printed; all are counted


@dataclass
class DumpDiff:
    """Counts the leaf values compared and the differences found, printing the first SHOWN."""

    compared: int = 0
    differences: int = 0

    def walk(self, x: object, y: object, path: str = "") -> None:
        if type(x) is not type(y):
            self.report(f"{path}: type {type(x).__name__} vs {type(y).__name__}")
        elif isinstance(x, dict) and isinstance(y, dict):
            self.walk_dicts(x, y, path)
        elif isinstance(x, list) and isinstance(y, list):
            self.walk_lists(x, y, path)
        else:
            self.compared += 1
            if x != y:
                self.report(f"{path}: {str(x)[:200]!r} vs {str(y)[:200]!r}")

    def walk_dicts(self, x: dict[str, object], y: dict[str, object], path: str) -> None:
        for key in sorted(set(x) | set(y)):
            if key not in x or key not in y:
                self.report(f"{path}/{key}: only in {'b' if key not in x else 'a'}")
            else:
                self.walk(x[key], y[key], f"{path}/{key}")

    def walk_lists(self, x: list[object], y: list[object], path: str) -> None:
        if len(x) != len(y):
            self.report(f"{path}: length {len(x)} vs {len(y)}")
        for index, (u, v) in enumerate(zip(x, y, strict=False)):
            self.walk(u, v, f"{path}[{index}]")

    def report(self, what: str) -> None:
        self.differences += 1
        if self.differences <= SHOWN:
            print(f"DIFF {what}")
