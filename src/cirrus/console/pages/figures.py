"""How the data pages (Usage, Keys, Logs, Models) write numbers, sizes, money and times: passed to their
templates as `fmt`, so every page writes a figure the same way."""

import math
from dataclasses import dataclass
from datetime import UTC, datetime

from cirrus.metering.neurons import format_usd


def count(value: float) -> str:
    return f"{value:,.0f}"


def number(value: float) -> str:
    """Up to four significant digits, thousands separated: 0.0123, 1.09, 12,345."""
    if value == 0:
        return "0"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def usd(value: float) -> str:
    """Dollars and cents from $1; below, three significant digits written out: $0.0123, $0.00000047."""
    if value == 0 or value >= 1:
        return "$0" if value == 0 else format_usd(value)
    decimals = max(2, 2 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}".rstrip("0")
    return "$" + (text if len(text.partition(".")[2]) >= 2 else f"{value:.2f}")


def size(value: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{value / scale:,.1f} {unit}"
    return f"{value:,.0f} B"


def percent(share: float) -> str:
    return f"{share * 100:.0f}%"


def when(unix_s: float | None) -> str:
    """UTC, to the minute; `-` for none."""
    if unix_s is None:
        return "-"
    return datetime.fromtimestamp(unix_s, UTC).strftime("%Y-%m-%d %H:%M")


def seconds(value: float) -> str:
    return f"{value * 1000:,.0f} ms" if value < 1 else f"{value:,.2f} s"


@dataclass(frozen=True)
class Figures:
    count = staticmethod(count)
    number = staticmethod(number)
    usd = staticmethod(usd)
    size = staticmethod(size)
    percent = staticmethod(percent)
    when = staticmethod(when)
    seconds = staticmethod(seconds)


FIGURES = Figures()
