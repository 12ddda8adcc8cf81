"""Charts drawn on the server as inline SVG: no chart library, no script, nothing the CSP has to allow.

Every text that goes into the SVG (model ids, day labels) is escaped here, so a template may insert the result
as it is. Colours are SVG presentation attributes, not `style`, which `style-src 'self'` would refuse.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

# Okabe and Ito's palette: distinguishable with the common colour-vision deficiencies.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#999999")
GAUGE_COLOURS = ((0.8, "#009E73"), (1.0, "#E69F00"))  # below 80%, below 100%; beyond that the last one
GAUGE_FULL = "#D55E00"


@dataclass(frozen=True)
class ChartBox:
    width: int = 720
    height: int = 260
    left: int = 56  # room for the y-axis labels
    right: int = 12
    top: int = 12
    bottom: int = 40  # room for the x-axis labels

    @property
    def plot_width(self) -> int:
        return self.width - self.left - self.right

    @property
    def plot_height(self) -> int:
        return self.height - self.top - self.bottom


def nice_step(largest: float, ticks: int = 4) -> float:
    """A round step (1, 2 or 5 times a power of ten) that covers `largest` in about `ticks` steps."""
    if largest <= 0:
        return 1.0
    rough = largest / ticks
    power = 10.0 ** math.floor(math.log10(rough))
    return float(next(m * power for m in (1, 2, 5, 10) if m * power >= rough))


def format_number(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:,.4g}"


def series_colours(names: Sequence[str]) -> dict[str, str]:
    return {name: PALETTE[index % len(PALETTE)] for index, name in enumerate(names)}


def stacked_bars(
    labels: Sequence[str],
    series: Mapping[str, Sequence[float]],
    *,
    title: str,
    whole_numbers: bool = False,
    box: ChartBox = ChartBox(),
) -> Markup:
    """One bar per label, stacked by series in the mapping's order; each value at `series[name][i]`.
    `whole_numbers`: counts, so the axis never steps by less than 1.

    Each segment carries `data-series`, `data-label` and `data-value`, and a `<title>` the browser shows on
    hover; the legend names every series."""
    totals = [sum(values[i] for values in series.values()) for i in range(len(labels))]
    if not labels or max(totals, default=0) <= 0:
        return _empty_chart(title, box)
    step = max(1.0, nice_step(max(totals))) if whole_numbers else nice_step(max(totals))
    top = step * math.ceil(max(totals) / step)
    colours = series_colours(list(series))
    parts = [
        _open_svg(title, box, len(series)),
        *_y_axis(top, step, box),
        *_bars(labels, series, colours, top, box),
        *_x_labels(labels, box),
        *_legend(colours, box),
        "</svg>",
    ]
    return Markup("\n".join(parts))


def _open_svg(title: str, box: ChartBox, series_count: int) -> str:
    height = box.height + _legend_height(series_count)
    return (
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {box.width} {height}" '
        f'width="100%" role="img" aria-label="{escape(title)}" font-family="sans-serif" font-size="11">'
        f"<title>{escape(title)}</title>"
    )


def _empty_chart(title: str, box: ChartBox) -> Markup:
    return Markup(
        f'<svg class="chart chart-empty" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {box.width} 60" '
        f'width="100%" role="img" aria-label="{escape(title)}" font-family="sans-serif" font-size="13">'
        f'<title>{escape(title)}</title><text x="{box.width // 2}" y="34" text-anchor="middle" '
        'fill="currentColor">No usage in this period</text></svg>'
    )


def _y_axis(top: float, step: float, box: ChartBox) -> list[str]:
    lines = []
    ticks = round(top / step)
    for index in range(ticks + 1):
        value = step * index
        y = box.top + box.plot_height * (1 - value / top)
        lines.append(
            f'<line x1="{box.left}" x2="{box.width - box.right}" y1="{y:.1f}" y2="{y:.1f}" '
            'stroke="currentColor" stroke-opacity="0.15"/>'
            f'<text x="{box.left - 6}" y="{y + 4:.1f}" text-anchor="end" fill="currentColor">'
            f"{escape(format_number(value))}</text>"
        )
    return lines


def _bars(
    labels: Sequence[str],
    series: Mapping[str, Sequence[float]],
    colours: Mapping[str, str],
    top: float,
    box: ChartBox,
) -> list[str]:
    slot = box.plot_width / len(labels)
    width = max(1.0, slot * 0.7)
    rects = []
    for index, label in enumerate(labels):
        x = box.left + slot * index + (slot - width) / 2
        base = 0.0
        for name, values in series.items():
            value = values[index]
            if value <= 0:
                continue
            y = box.top + box.plot_height * (1 - (base + value) / top)
            height = box.plot_height * value / top
            tip = f"{name}, {label}: {format_number(value)}"
            rects.append(
                f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" height="{height:.1f}" '
                f'fill="{colours[name]}" data-series="{escape(name)}" data-label="{escape(label)}" '
                f'data-value="{value:g}"><title>{escape(tip)}</title></rect>'
            )
            base += value
    return rects


def _x_labels(labels: Sequence[str], box: ChartBox) -> list[str]:
    """At most about ten labels, evenly spaced, so thirty days stay readable."""
    slot = box.plot_width / len(labels)
    every = max(1, math.ceil(len(labels) / 10))
    y = box.top + box.plot_height + 16
    return [
        f'<text x="{box.left + slot * (i + 0.5):.1f}" y="{y}" text-anchor="middle" fill="currentColor">'
        f"{escape(_short_day(label))}</text>"
        for i, label in enumerate(labels)
        if i % every == 0
    ]


def _short_day(label: str) -> str:
    """`2025-03-14` -> `03-14`; other labels as they are."""
    return label[5:] if len(label) == 10 and label[4] == "-" else label


LEGEND_ROW = 16


def _legend_height(series_count: int) -> int:
    return LEGEND_ROW * math.ceil(series_count / 2)


def _legend(colours: Mapping[str, str], box: ChartBox) -> list[str]:
    """Two columns under the plot."""
    items = []
    column_width = (box.width - box.left) / 2
    for index, (name, colour) in enumerate(colours.items()):
        x = box.left + column_width * (index % 2)
        y = box.height - 8 + LEGEND_ROW * (index // 2)
        items.append(
            f'<g class="legend-item" data-series="{escape(name)}"><rect x="{x:.1f}" y="{y - 9}" width="10" '
            f'height="10" fill="{colour}"/><text x="{x + 14:.1f}" y="{y}" fill="currentColor">'
            f"{escape(name)}</text></g>"
        )
    return items


def gauge(used: float, limit: float, *, title: str, width: int = 320, height: int = 14) -> Markup:
    """A horizontal bar, filled to used / limit (full beyond it): green, amber from 80%, red from 100%."""
    share = used / limit if limit > 0 else (1.0 if used > 0 else 0.0)
    filled = width * min(1.0, share)
    colour = next((c for bound, c in GAUGE_COLOURS if share < bound), GAUGE_FULL)
    return Markup(
        f'<svg class="gauge" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="meter" aria-valuemin="0" aria-valuemax="{limit:g}" '
        f'aria-valuenow="{used:g}" aria-label="{escape(title)}" data-share="{share:.4f}">'
        f"<title>{escape(title)}</title>"
        f'<rect width="{width}" height="{height}" rx="3" fill="currentColor" fill-opacity="0.12"/>'
        f'<rect class="gauge-fill" width="{filled:.1f}" height="{height}" rx="3" fill="{colour}"/></svg>'
    )
