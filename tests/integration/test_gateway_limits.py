"""Rate limits, budgets and metering through the real server: a limit shared by two gateways over Redis, a
free account's daily allocation, a token's monthly spend limit, and usage read back over HTTP and the CLI."""

import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from tests.integration.conftest import Gateway
from tests.integration.gateway import SMOLLM, bearer, provision, write_gateway_catalog
from tests.integration.server import Server, running_server, wait_until

pytestmark = pytest.mark.integration

BODY = {"prompt": "Say hi", "max_tokens": 2, "temperature": 0}


def run(server: Server, token: str, headers: dict[str, str] | None = None) -> httpx.Response:
    url = f"{server.url}/ai/run/{SMOLLM}"
    return httpx.post(url, json=BODY, headers={**bearer(token), **(headers or {})}, timeout=120)


def error_code(response: httpx.Response) -> int:
    code: int = response.json()["errors"][0]["code"]
    return code


def test_requests_over_a_token_s_limit_are_refused_with_headers_that_say_when(
    gateway_sqlite: Gateway,
) -> None:
    server, token = gateway_sqlite.server, gateway_sqlite.ids.limited
    first, second, third = (run(server, token) for _ in range(3))
    assert first.status_code == second.status_code == 200
    assert first.headers["x-ratelimit-limit-requests"] == "2"
    assert [
        first.headers["x-ratelimit-remaining-requests"],
        second.headers["x-ratelimit-remaining-requests"],
    ] == [
        "1",
        "0",
    ]
    assert third.status_code == 429 and error_code(third) == 971
    assert "2 requests per minute" in third.json()["errors"][0]["message"]
    assert 1 <= int(third.headers["retry-after"]) <= 60
    assert third.headers["x-ratelimit-remaining-requests"] == "0"
    chat = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": SMOLLM, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        headers=bearer(token),
        timeout=60,
    )
    assert chat.status_code == 429 and chat.json()["error"]["type"] == "rate_limit_error"


@pytest.fixture(scope="module")
def two_gateways(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str
) -> Iterator[tuple[Gateway, Gateway]]:
    """Two gateway processes on one database and one Redis, as two nodes behind a load balancer would be."""
    directory = tmp_path_factory.mktemp("two-gateways")
    database = str(directory / "cirrus.db")
    ids = provision(database)
    catalog = str(write_gateway_catalog(directory))
    env = {"database": database, "redis_url": redis_url, "auth_cache_ttl_s": "0"}
    one_dir, two_dir = directory / "one", directory / "two"
    one_dir.mkdir()
    two_dir.mkdir()
    with (
        running_server(one_dir, "--catalog", catalog, **env) as one,
        running_server(two_dir, "--catalog", catalog, **env) as two,
    ):
        yield Gateway(one, ids, database), Gateway(two, ids, database)


def test_two_gateways_enforce_one_limit_together(two_gateways: tuple[Gateway, Gateway]) -> None:
    one, two = two_gateways
    token = one.ids.limited
    assert run(one.server, token).status_code == 200
    assert run(two.server, token).status_code == 200
    for server in (one.server, two.server):
        refused = run(server, token)
        assert refused.status_code == 429 and error_code(refused) == 971


def test_two_gateways_share_the_response_cache(two_gateways: tuple[Gateway, Gateway]) -> None:
    one, two = two_gateways
    cached = {"cf-aig-cache-ttl": "300", "cf-aig-cache-key": "shared-between-gateways"}
    first = run(one.server, one.ids.run, cached)
    second = run(two.server, two.ids.run, cached)
    assert first.headers["cf-aig-cache-status"] == "MISS"
    assert second.headers["cf-aig-cache-status"] == "HIT"
    assert second.json()["result"] == first.json()["result"]


def test_a_free_account_past_its_daily_allocation_is_refused(gateway: Gateway) -> None:
    first = run(gateway.server, gateway.ids.frugal)
    assert first.status_code == 200, first.text
    refused = run(gateway.server, gateway.ids.frugal)
    assert refused.status_code == 429 and error_code(refused) == 3036
    assert "daily free allocation" in refused.json()["errors"][0]["message"]
    assert 0 < int(refused.headers["retry-after"]) <= 86400


def test_a_token_past_its_monthly_spend_limit_is_refused(gateway: Gateway) -> None:
    assert run(gateway.server, gateway.ids.spender).status_code == 200
    refused = run(gateway.server, gateway.ids.spender)
    assert refused.status_code == 429 and error_code(refused) == 3053


def _usage(server: Server, token: str) -> dict[str, object]:
    response = httpx.get(f"{server.url}/usage", params={"model": SMOLLM}, headers=bearer(token), timeout=10)
    assert response.status_code == 200, response.text
    result: dict[str, object] = response.json()["result"]
    return result


def test_every_request_is_metered_and_usage_reads_back(gateway: Gateway) -> None:
    ids = gateway.ids
    answers = [run(gateway.server, ids.collector) for _ in range(2)]
    prompt_tokens = sum(a.json()["result"]["usage"]["prompt_tokens"] for a in answers)

    def collector_row() -> dict[str, object] | None:
        rows = _usage(gateway.server, ids.run)["rows"]
        assert isinstance(rows, list)
        tokens = [
            row
            for row in rows
            if row["token_id"] and row["requests"] >= 2 and row["prompt_tokens"] == prompt_tokens
        ]
        return tokens[0] if tokens else None

    assert wait_until(lambda: collector_row() is not None, timeout_s=10)
    row = collector_row()
    assert row is not None
    assert row["model"] == SMOLLM and row["neurons"] > 0 and row["cost_usd"] > 0  # type: ignore[operator]


def test_the_usage_command_prints_the_account_s_usage(gateway_sqlite: Gateway) -> None:
    run(gateway_sqlite.server, gateway_sqlite.ids.run)
    command = [sys.executable, "-m", "cirrus.cli", "usage", "--url", gateway_sqlite.server.url]
    done = subprocess.run(
        [*command, "--token", gateway_sqlite.ids.run], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert SMOLLM in done.stdout
    refused = subprocess.run(
        [*command, "--token", "cirrus_" + "y" * 40], capture_output=True, text=True, timeout=60
    )
    assert refused.returncode != 0 and "Authentication error" in refused.stderr
