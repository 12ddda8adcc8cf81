"""An open node (no tokens) serves loopback only, unless the operator says otherwise."""

import pytest

from cirrus.gateway.open_mode import is_loopback, open_mode_refusal


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost"])
def test_loopback_addresses(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "example.com", ""])
def test_other_addresses(host: str) -> None:
    assert not is_loopback(host)


def test_an_open_node_on_loopback_starts() -> None:
    assert open_mode_refusal("127.0.0.1", has_tokens=False, allow_open=False) is None


def test_an_open_node_on_any_other_address_is_refused_with_what_to_do() -> None:
    refusal = open_mode_refusal("0.0.0.0", has_tokens=False, allow_open=False)
    assert refusal is not None and "--allow-open" in refusal and "cirrus tokens create" in refusal


def test_tokens_or_an_explicit_allowance_let_it_start_anywhere() -> None:
    assert open_mode_refusal("0.0.0.0", has_tokens=True, allow_open=False) is None
    assert open_mode_refusal("0.0.0.0", has_tokens=False, allow_open=True) is None
