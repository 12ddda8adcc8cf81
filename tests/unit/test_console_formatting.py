"""How the console writes numbers (static/console.js's Cirrus.format mirrors these for live updates)."""

import pytest

from cirrus.console.formatting import format_value, lookup


@pytest.mark.parametrize(
    ("value", "kind", "written"),
    [
        (None, "int", "–"),
        (True, "bool", "yes"),
        (12345, "int", "12,345"),
        (2.26, "rate", "2.3/min"),
        (0.0512, "percent", "5.1%"),
        (0.0734, "seconds", "73 ms"),
        (1.5, "seconds", "1.50 s"),
        (512, "bytes", "512 B"),
        (3 * 1024**3, "bytes", "3.0 GiB"),
        ("ready", "text", "ready"),
    ],
)
def test_values_are_written_for_people(value: object, kind: str, written: str) -> None:
    assert format_value(value, kind) == written


def test_a_dotted_path_reads_nested_values_and_none_where_a_step_is_missing() -> None:
    data = {"traffic": {"requests": 3}, "node": None}
    assert lookup(data, "traffic.requests") == 3
    assert lookup(data, "node.queue_depth") is None
    assert lookup(data, "absent") is None
