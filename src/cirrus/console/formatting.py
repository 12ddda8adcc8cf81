"""How the console writes numbers; static/console.js's `Cirrus.format` writes them the same way for live updates."""

from typing import Any

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_value(value: Any, kind: str) -> str:
    if value is None:
        return "–"
    if kind == "bool":
        return "yes" if value else "no"
    if kind == "int":
        return f"{int(value):,}"
    if kind == "rate":
        return f"{float(value):.1f}/min"
    if kind == "percent":
        return f"{float(value) * 100:.1f}%"
    if kind == "seconds":
        seconds = float(value)
        return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"
    if kind == "bytes":
        return _bytes(float(value))
    return str(value)


def _bytes(size: float) -> str:
    for unit in _UNITS:
        if abs(size) < 1024 or unit == _UNITS[-1]:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} {_UNITS[-1]}"


def lookup(data: dict[str, Any], path: str) -> Any:
    """`a.b.c` in nested dicts; None where a step is missing."""
    value: Any = data
    for key in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value
