"""The console's frame in process, on a real Platform with no model loaded: open mode, sign-in and its cookie,
redirects, permissions, CSRF, the security headers, and the session on the API routes."""

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest_asyncio

from cirrus.auth import Permission
from cirrus.config import Settings
from cirrus.console.headers import CONTENT_SECURITY_POLICY
from cirrus.platform import Platform
from cirrus.server.app import create_app

CSRF_META = re.compile(r'<meta name="cirrus-csrf" content="([^"]*)">')
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@dataclass
class Node:
    platform: Platform
    client: httpx.AsyncClient

    async def token(self, name: str, *permissions: Permission) -> str:
        identity = self.platform.gateway.identity
        account = await identity.create_account("alpha")
        secret, _ = await identity.create_token(
            account.id, name, permissions=permissions or tuple(Permission)
        )
        return secret

    async def sign_in(self, secret: str) -> str:
        """Signs in; returns the page's CSRF token."""
        answer = await self.client.post("/console/signin", content=f"token={secret}", headers=FORM)
        assert answer.status_code == 303, answer.text
        return csrf_of(await self.client.get("/console/overview"))


def csrf_of(page: httpx.Response) -> str:
    found = CSRF_META.search(page.text)
    assert found is not None, page.text[:300]
    return found.group(1)


@pytest_asyncio.fixture(loop_scope="function")
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    settings = Settings(state_dir=tmp_path, spare_workers=0, auth_cache_ttl_s=0.0, catalog=None)
    platform = Platform(settings)
    await platform.start()
    transport = httpx.ASGITransport(app=create_app(platform))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8787") as client:
            yield Node(platform, client)
    finally:
        await platform.close()


async def test_an_open_node_shows_the_console_without_sign_in(node: Node) -> None:
    root = await node.client.get("/")
    assert (root.status_code, root.headers["location"]) == (303, "/console/overview")
    page = await node.client.get("/console/overview")
    assert page.status_code == 200 and "open node" in page.text
    csrf = csrf_of(page)
    assert csrf and "Sign out" not in page.text
    assert (
        await node.client.post("/console/signout", content=f"csrf={csrf}", headers=FORM)
    ).status_code == 303
    assert (await node.client.post("/console/signout")).status_code == 403  # still CSRF-checked


async def test_with_tokens_a_browser_without_a_session_is_sent_to_sign_in(node: Node) -> None:
    await node.token("alice")
    for path in ("/console/overview", "/console/playground"):
        answer = await node.client.get(path)
        assert (answer.status_code, answer.headers["location"]) == (303, "/console/signin")
    api = await node.client.get("/console/api/overview")
    assert api.status_code == 401 and api.json()["sign_in"] == "/console/signin"
    assert (await node.client.get("/console/signin")).status_code == 200


async def test_the_session_cookie_is_http_only_strict_and_secure_over_https(node: Node) -> None:
    secret = await node.token("alice")
    plain = await node.client.post("/console/signin", content=f"token={secret}", headers=FORM)
    flags = {flag.strip().lower() for flag in plain.headers["set-cookie"].split(";")[1:]}
    assert {"httponly", "samesite=strict", "path=/"} <= flags and "secure" not in flags
    assert any(flag.startswith("max-age=") for flag in flags)
    secure = await node.client.post(
        "https://127.0.0.1:8787/console/signin", content=f"token={secret}", headers=FORM
    )
    assert "secure" in {flag.strip().lower() for flag in secure.headers["set-cookie"].split(";")[1:]}
    assert secret not in plain.headers["set-cookie"] + plain.headers["location"]


async def test_a_wrong_token_and_a_cross_site_form_get_the_same_answer(node: Node) -> None:
    secret = await node.token("alice")
    wrong = await node.client.post("/console/signin", content="token=cirrus_nope", headers=FORM)
    cross_site = await node.client.post(
        "/console/signin", content=f"token={secret}", headers={**FORM, "Sec-Fetch-Site": "cross-site"}
    )
    foreign = await node.client.post(
        "/console/signin", content=f"token={secret}", headers={**FORM, "Origin": "https://evil.example"}
    )
    empty = await node.client.post("/console/signin", content="", headers=FORM)
    assert {r.status_code for r in (wrong, cross_site, foreign, empty)} == {401}
    assert wrong.text == cross_site.text == foreign.text == empty.text
    assert "set-cookie" not in wrong.headers and "set-cookie" not in cross_site.headers


async def test_signing_out_needs_the_csrf_token_and_ends_the_session(node: Node) -> None:
    csrf = await node.sign_in(await node.token("alice"))
    assert (await node.client.post("/console/signout")).status_code == 403
    assert (
        await node.client.post("/console/signout", headers={"X-Cirrus-CSRF": "forged"})
    ).status_code == 403
    assert (await node.client.get("/console/overview")).status_code == 200
    out = await node.client.post("/console/signout", content=f"csrf={csrf}", headers=FORM)
    assert (out.status_code, out.headers["location"]) == (303, "/console/signin")
    assert (await node.client.get("/console/overview")).status_code == 303


async def test_the_nav_and_pages_follow_the_permissions(node: Node) -> None:
    await node.sign_in(await node.token("runner", Permission.RUN, Permission.READ_USAGE))
    page = await node.client.get("/console/overview")
    assert 'href="/console/playground"' in page.text and 'href="/console/keys"' not in page.text
    assert (await node.client.get("/console/api/overview")).json()["node"] is None
    node.client.cookies.clear()
    await node.sign_in(await node.token("reader", Permission.READ_USAGE))
    refused = await node.client.get("/console/playground")
    assert refused.status_code == 403 and "run permission" in refused.text
    assert refused.headers["content-security-policy"] == CONTENT_SECURITY_POLICY


async def test_user_data_is_escaped_in_pages(node: Node) -> None:
    await node.sign_in(await node.token("<script>alert(1)</script>"))
    page = await node.client.get("/console/overview")
    assert "<script>alert(1)</script>" not in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text


async def test_every_console_response_carries_the_security_headers(node: Node) -> None:
    await node.token("alice")
    answers = [
        await node.client.get("/"),
        await node.client.get("/console/signin"),
        await node.client.get("/console/api/overview"),
        await node.client.get("/console/static/console.js"),
    ]
    for answer in answers:
        assert answer.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["referrer-policy"] == "no-referrer"
    api = await node.client.get("/v1/models")
    assert "content-security-policy" not in api.headers  # the APIs are left as they were


async def test_the_api_takes_the_session_only_with_its_csrf_header_and_a_bearer_wins(node: Node) -> None:
    csrf = await node.sign_in(await node.token("alice"))
    assert (await node.client.get("/v1/models", headers={"X-Cirrus-CSRF": csrf})).status_code == 200
    without = await node.client.get("/v1/models")
    assert without.status_code == 403 and "X-Cirrus-CSRF" in without.json()["error"]["message"]
    bad_bearer = await node.client.get(
        "/v1/models", headers={"X-Cirrus-CSRF": csrf, "Authorization": "Bearer cirrus_nope"}
    )
    assert bad_bearer.status_code == 401


async def test_the_playground_offers_the_catalog_and_says_when_no_embedding_model_is_installed(
    node: Node,
) -> None:
    page = await node.client.get("/console/playground")
    assert page.status_code == 200
    for entry in node.platform.catalog.entries():
        assert entry.spec.id in page.text
    embeddings_installed = any(
        entry.installed and entry.spec.task == "text-embeddings" for entry in node.platform.catalog.entries()
    )
    assert ('id="no-embedding-model"' in page.text) != embeddings_installed
    assert ('id="embedding-model"' in page.text) == embeddings_installed


async def test_an_open_node_answers_only_under_a_loopback_host(node: Node) -> None:
    """A page elsewhere that rebinds its own name to 127.0.0.1 sends that name as Host: refused, so it cannot
    read the CSRF token and create the node's first (admin) token."""
    for host in ("127.0.0.1:8787", "localhost:8787", "[::1]:8787", "localhost"):
        assert (await node.client.get("/console/keys", headers={"Host": host})).status_code == 200, host
    rebound = await node.client.get("/console/keys", headers={"Host": "attacker.example:8787"})
    assert rebound.status_code == 403 and "loopback" in rebound.text
    assert csrf_of(rebound) == ""  # the open node's CSRF token is not handed out
    api = await node.client.get("/v1/models", headers={"Host": "attacker.example:8787"})
    assert api.status_code == 403 and "loopback" in api.json()["error"]["message"]


async def test_a_malformed_credential_header_never_falls_back_to_the_session(node: Node) -> None:
    csrf = await node.sign_in(await node.token("alice"))
    for header in ({"Authorization": "Basic YTpi"}, {"Authorization": "Bearer "}, {"x-api-key": ""}):
        answer = await node.client.get("/v1/models", headers={"X-Cirrus-CSRF": csrf, **header})
        assert answer.status_code == 401, header


async def test_signing_in_again_ends_the_session_the_browser_held(node: Node) -> None:
    await node.sign_in(await node.token("alice"))
    first = node.client.cookies["cirrus_session"]
    await node.sign_in(await node.token("bob"))
    assert node.client.cookies["cirrus_session"] != first
    node.client.cookies.set("cirrus_session", first)
    assert (await node.client.get("/console/overview")).status_code == 303  # the old session is gone


async def test_a_null_origin_signs_in_only_from_our_own_pages(node: Node) -> None:
    secret = await node.token("alice")
    sandboxed = await node.client.post(
        "/console/signin", content=f"token={secret}", headers={**FORM, "Origin": "null"}
    )
    assert sandboxed.status_code == 401
    own = await node.client.post(
        "/console/signin",
        content=f"token={secret}",
        headers={**FORM, "Origin": "null", "Sec-Fetch-Site": "same-origin"},
    )
    assert own.status_code == 303


async def test_models_show_a_non_admin_only_what_its_token_may_use_and_no_internals(node: Node) -> None:
    identity = node.platform.gateway.identity
    account = await identity.create_account("beta")
    secret, _ = await identity.create_token(
        account.id, "narrow", model_patterns=("@cf/google/*",), permissions=(Permission.RUN,)
    )
    await node.sign_in(secret)
    page = await node.client.get("/console/models")
    assert page.status_code == 200
    assert (
        "smollm2" not in page.text and "Memory budget" not in page.text and "Packed variants" not in page.text
    )


async def test_a_malformed_date_is_a_clear_400(node: Node) -> None:
    await node.sign_in(await node.token("alice"))
    for path in ("/console/usage?until=x", "/console/usage.csv?until=2026-13-01"):
        answer = await node.client.get(path)
        assert answer.status_code == 400 and "YYYY-MM-DD" in answer.text, path
