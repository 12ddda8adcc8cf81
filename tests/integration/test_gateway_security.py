"""Who may call what, through the real server on both database engines: every refusal is a clear 401 or 403
in the caller's protocol, and none tells whether a model or an account exists."""

from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.integration.conftest import Gateway
from tests.integration.gateway import SMOLLM, UNKNOWN, bearer
from tests.integration.server import running_server

pytestmark = pytest.mark.integration

BODY = {"prompt": "Say hi", "max_tokens": 2, "temperature": 0}
CHAT = {"model": SMOLLM, "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 2}
WRONG = "cirrus_" + "x" * 40


def run(
    gateway: Gateway, token: str | None, model: str = SMOLLM, account: str | None = None
) -> httpx.Response:
    prefix = f"/client/v4/accounts/{account}" if account else ""
    url = f"{gateway.server.url}{prefix}/ai/run/{model}"
    return httpx.post(url, json=BODY, headers=bearer(token), timeout=120)


def chat(gateway: Gateway, token: str | None, model: str = SMOLLM) -> httpx.Response:
    url = f"{gateway.server.url}/v1/chat/completions"
    return httpx.post(url, json={**CHAT, "model": model}, headers=bearer(token), timeout=120)


def workers_ai_error(response: httpx.Response) -> tuple[int, int]:
    body: dict[str, Any] = response.json()
    assert body["success"] is False and body["result"] is None
    return response.status_code, body["errors"][0]["code"]


def token_named(gateway: Gateway, name: str) -> str | None:
    return None if name == "none" else WRONG if name == "wrong" else getattr(gateway.ids, name)


@pytest.mark.parametrize("name", ["none", "wrong", "expired", "revoked"])
def test_a_request_without_a_valid_token_is_refused_alike(gateway: Gateway, name: str) -> None:
    token = token_named(gateway, name)
    refused = run(gateway, token)
    assert workers_ai_error(refused) == (401, 10000)
    assert refused.headers["www-authenticate"] == "Bearer"
    assert refused.json()["errors"][0]["message"] == "Authentication error"
    openai_refusal = chat(gateway, token)
    assert openai_refusal.status_code == 401
    assert openai_refusal.json()["error"]["type"] == "authentication_error"
    # Unknown, expired and revoked read the same, and a model that does not exist reads the same too.
    assert run(gateway, token, UNKNOWN).json() == refused.json()


def test_a_valid_token_runs_on_both_protocols(gateway: Gateway) -> None:
    answer = run(gateway, gateway.ids.run)
    assert answer.status_code == 200, answer.text
    assert answer.json()["result"]["usage"]["completion_tokens"] == 2
    client = openai.OpenAI(base_url=f"{gateway.server.url}/v1", api_key=gateway.ids.run, max_retries=0)
    completion = client.chat.completions.create(**CHAT)  # type: ignore[call-overload]
    assert completion.usage.completion_tokens == 2


def test_the_openai_sdk_sees_its_own_errors(gateway: Gateway) -> None:
    for token, error in (
        (WRONG, openai.AuthenticationError),
        (gateway.ids.narrow, openai.PermissionDeniedError),
    ):
        client = openai.OpenAI(base_url=f"{gateway.server.url}/v1", api_key=token, max_retries=0)
        with pytest.raises(error):
            client.chat.completions.create(**CHAT)  # type: ignore[call-overload]


def test_a_token_acts_only_for_its_own_account(gateway: Gateway) -> None:
    ids = gateway.ids
    assert run(gateway, ids.run, account=ids.account_a).status_code == 200
    existing = run(gateway, ids.run, account=ids.account_b)
    missing = run(gateway, ids.run, account="0" * 32)
    assert workers_ai_error(existing) == (403, 10000)
    assert existing.json() == missing.json()  # another account and no account read the same
    assert run(gateway, ids.other, account=ids.account_a).status_code == 403


def test_a_scope_without_the_model_is_refused_before_the_model_is_looked_up(gateway: Gateway) -> None:
    existing = run(gateway, gateway.ids.narrow, SMOLLM)
    missing = run(gateway, gateway.ids.narrow, "@cf/huggingface/no-such-model")
    assert workers_ai_error(existing) == (403, 3041)
    assert existing.json() == missing.json()
    assert chat(gateway, gateway.ids.narrow).json()["error"]["code"] == "model_not_allowed"
    # Inside its scope, an unknown model is an ordinary 400/5007.
    assert workers_ai_error(run(gateway, gateway.ids.narrow, "@cf/google/no-such-model")) == (400, 5007)


def test_a_token_without_the_run_permission_cannot_run(gateway: Gateway) -> None:
    assert workers_ai_error(run(gateway, gateway.ids.usage_only)) == (403, 10000)


@pytest.mark.parametrize(
    "method, path", [("GET", "/admin/instances"), ("POST", f"/admin/models/{SMOLLM}/unload")]
)
def test_admin_routes_need_the_admin_permission(gateway: Gateway, method: str, path: str) -> None:
    url = f"{gateway.server.url}{path}"
    for token in (None, gateway.ids.run):
        refused = httpx.request(method, url, headers=bearer(token), timeout=30)
        assert refused.status_code in (401, 403)
        assert refused.json()["success"] is False
    allowed = httpx.request(method, url, headers=bearer(gateway.ids.admin), timeout=60)
    assert allowed.status_code == 200, allowed.text


def test_health_needs_no_token(gateway: Gateway) -> None:
    assert httpx.get(f"{gateway.server.url}/healthz", timeout=10).status_code == 200


def test_usage_is_read_only_for_the_caller_s_own_account(gateway: Gateway) -> None:
    ids = gateway.ids
    url = f"{gateway.server.url}/client/v4/accounts/{ids.account_b}/ai/usage"
    assert httpx.get(url, headers=bearer(ids.run), timeout=10).status_code == 403
    own = httpx.get(url, headers=bearer(ids.other), timeout=10)
    assert own.status_code == 200 and own.json()["result"]["account_id"] == ids.account_b


def test_metrics_can_require_an_admin_token(gateway_sqlite: Gateway, tmp_path: Path) -> None:
    database = gateway_sqlite.database_url
    with running_server(
        tmp_path, database=database, metrics_token_required="true", auth_cache_ttl_s="0"
    ) as server:
        url = f"{server.url}/metrics"
        assert httpx.get(url, timeout=10).status_code == 401
        assert httpx.get(url, headers=bearer(gateway_sqlite.ids.run), timeout=10).status_code == 403
        allowed = httpx.get(url, headers=bearer(gateway_sqlite.ids.admin), timeout=10)
        assert allowed.status_code == 200 and "cirrus_memory_budget_bytes" in allowed.text


def test_model_lists_show_only_what_the_token_may_use(gateway: Gateway) -> None:
    listed = httpx.get(f"{gateway.server.url}/v1/models", headers=bearer(gateway.ids.narrow), timeout=10)
    assert listed.status_code == 200
    assert all(model["id"].startswith("@cf/google/") for model in listed.json()["data"])
    search = httpx.get(
        f"{gateway.server.url}/ai/models/search", headers=bearer(gateway.ids.narrow), timeout=10
    )
    assert all(model["name"].startswith("@cf/google/") for model in search.json()["result"])
    existing = httpx.get(
        f"{gateway.server.url}/v1/models/{SMOLLM}", headers=bearer(gateway.ids.narrow), timeout=10
    )
    missing = httpx.get(
        f"{gateway.server.url}/v1/models/{UNKNOWN}", headers=bearer(gateway.ids.narrow), timeout=10
    )
    assert existing.status_code == missing.status_code == 404
    assert existing.json()["error"]["code"] == missing.json()["error"]["code"] == "model_not_found"
    full = httpx.get(f"{gateway.server.url}/v1/models", headers=bearer(gateway.ids.run), timeout=10)
    assert SMOLLM in {model["id"] for model in full.json()["data"]}
