"""The console's server-drawn SVG: well-formed, stacked right, every text escaped, gauges filled and coloured."""

import xml.etree.ElementTree as ET

import pytest

from cirrus.console.svg import GAUGE_FULL, ChartBox, gauge, nice_step, stacked_bars

SVG = "{http://www.w3.org/2000/svg}"


def parse(markup: str) -> ET.Element:
    return ET.fromstring(markup)


def bars(root: ET.Element) -> list[ET.Element]:
    return [e for e in root.iter(f"{SVG}rect") if e.get("class") == "bar"]


def test_bars_stack_each_day_by_series() -> None:
    days = ["2025-03-01", "2025-03-02", "2025-03-03"]
    chart = stacked_bars(days, {"@cf/a/x": [3, 0, 1], "@cf/b/y": [1, 2, 0]}, title="Requests per day")
    root = parse(chart)
    drawn = [(b.get("data-series"), b.get("data-label"), b.get("data-value")) for b in bars(root)]
    assert drawn == [
        ("@cf/a/x", "2025-03-01", "3"),
        ("@cf/b/y", "2025-03-01", "1"),
        ("@cf/b/y", "2025-03-02", "2"),
        ("@cf/a/x", "2025-03-03", "1"),
    ]
    first, second = bars(root)[:2]
    # the second segment sits right on top of the first
    assert float(second.get("y", "0")) + float(second.get("height", "0")) == pytest.approx(
        float(first.get("y", "0"))
    )
    heights = [float(b.get("height", "0")) for b in bars(root)]
    assert heights[0] == pytest.approx(3 * heights[1])
    legend = [g.get("data-series") for g in root.iter(f"{SVG}g") if g.get("class") == "legend-item"]
    assert legend == ["@cf/a/x", "@cf/b/y"]
    assert root.get("aria-label") == "Requests per day"


def test_the_tallest_bar_fits_under_the_top_tick() -> None:
    box = ChartBox()
    root = parse(stacked_bars(["d"], {"m": [7.0]}, title="t", box=box))
    (bar,) = bars(root)
    assert float(bar.get("y", "0")) >= box.top
    assert float(bar.get("y", "0")) + float(bar.get("height", "0")) == pytest.approx(
        box.top + box.plot_height
    )


def test_every_text_is_escaped() -> None:
    evil = '<script>alert("x")</script>'
    chart = stacked_bars([evil], {evil: [1.0]}, title=evil)
    assert "<script>" not in chart
    root = parse(chart)  # still well-formed
    assert bars(root)[0].get("data-series") == evil


def test_no_usage_draws_a_note_not_bars() -> None:
    root = parse(stacked_bars(["2025-03-01"], {"m": [0.0]}, title="t"))
    assert bars(root) == []
    assert "No usage" in "".join(root.itertext())
    assert bars(parse(stacked_bars([], {}, title="t"))) == []


def test_steps_are_round() -> None:
    assert nice_step(7) == 2
    assert nice_step(100) == 50
    assert nice_step(0.03) == pytest.approx(0.01)
    assert nice_step(0) == 1


def test_gauges_fill_to_their_share_and_turn_red_past_the_limit() -> None:
    half = parse(gauge(50, 200, title="Neurons <today>", width=200))
    fill = next(e for e in half.iter(f"{SVG}rect") if e.get("class") == "gauge-fill")
    assert float(fill.get("width", "0")) == pytest.approx(50)
    assert half.get("aria-valuenow") == "50"
    assert half.get("aria-label") == "Neurons <today>"
    over = parse(gauge(300, 200, title="t", width=200))
    fill = next(e for e in over.iter(f"{SVG}rect") if e.get("class") == "gauge-fill")
    assert (float(fill.get("width", "0")), fill.get("fill")) == (200, GAUGE_FULL)
    assert parse(gauge(0, 0, title="t")).get("data-share") == "0.0000"
