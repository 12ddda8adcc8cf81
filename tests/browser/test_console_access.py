"""Access to the console: sign-in with a token, the session cookie, sign-out, CSRF, and what each token sees."""

import asyncio
import re

import httpx
import pytest
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait

from cirrus.auth import Permission
from cirrus.auth.store import IdentityStore
from cirrus.db import open_database
from tests.browser.conftest import WAIT_S, ConsoleServer, page_errors, screenshot, sign_in
from tests.integration.gateway import SMOLLM

pytestmark = pytest.mark.integration
WRONG_TOKEN = "That token cannot sign in"
CSRF_META = re.compile(r'<meta name="cirrus-csrf" content="([^"]+)">')


def nav_labels(driver: WebDriver) -> list[str]:
    return [link.text for link in driver.find_elements(By.CSS_SELECTOR, ".nav a")]


def test_without_a_session_every_page_sends_the_browser_to_sign_in(
    driver: WebDriver, console_server: ConsoleServer
) -> None:
    for path in ("/", "/console/overview", "/console/playground"):
        driver.get(console_server.url + path)
        assert driver.current_url == f"{console_server.url}/console/signin"
    assert driver.find_element(By.ID, "token").get_attribute("type") == "password"


def test_an_admin_signs_in_and_sees_the_live_overview(
    driver: WebDriver, console_server: ConsoleServer
) -> None:
    sign_in(driver, console_server, console_server.ids.admin)
    assert nav_labels(driver) == ["Overview", "Playground", "Models", "Usage", "Logs", "Keys", "Nodes"]
    assert driver.find_element(By.ID, "instances").is_displayed()
    # The page polls its JSON every 2 s and says when it last did.
    WebDriverWait(driver, WAIT_S).until(lambda d: d.find_element(By.ID, "updated").text.startswith("Updated"))
    ready = driver.find_element(By.CSS_SELECTOR, '[data-field="health.ready"]').text
    assert ready == "yes"
    requests = driver.find_element(By.CSS_SELECTOR, '[data-field="traffic.requests"]')
    before = int(requests.text.replace(",", ""))
    answered = httpx.post(
        f"{console_server.url}/v1/chat/completions",
        json={"model": SMOLLM, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
        headers={"Authorization": f"Bearer {console_server.ids.admin}"},
        timeout=60,
    )
    assert answered.status_code == 200
    # Without a reload, the count grows and the model's instance appears.
    WebDriverWait(driver, WAIT_S).until(lambda d: int(requests.text.replace(",", "")) > before)
    WebDriverWait(driver, WAIT_S).until(lambda d: SMOLLM in d.find_element(By.ID, "instances").text)
    # The answer's time to first token, from its usage record, is in the hour's percentiles.
    p50 = driver.find_element(By.CSS_SELECTOR, '[data-field="ttft.p50_s"]')
    WebDriverWait(driver, WAIT_S).until(lambda d: p50.text.endswith(("ms", " s")))
    screenshot(driver, "overview")
    assert page_errors(driver) == []


def test_a_token_without_admin_sees_neither_keys_nor_the_node(
    driver: WebDriver, console_server: ConsoleServer
) -> None:
    sign_in(driver, console_server, console_server.ids.run)
    assert "Keys" not in nav_labels(driver)
    assert driver.find_elements(By.ID, "instances") == []
    driver.get(f"{console_server.url}/console/api/overview")
    assert '"node":null' in driver.find_element(By.TAG_NAME, "body").text.replace(" ", "")


@pytest.mark.parametrize("which", ["revoked", "expired", "garbage"])
def test_a_token_that_cannot_sign_in_gets_the_same_message(
    driver: WebDriver, console_server: ConsoleServer, which: str
) -> None:
    token = {"revoked": console_server.ids.revoked, "expired": console_server.ids.expired}.get(which, "nope")
    driver.get(f"{console_server.url}/console/signin")
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "signin").click()
    message = WebDriverWait(driver, WAIT_S).until(lambda d: d.find_element(By.ID, "signin-error"))
    assert message.text.startswith(WRONG_TOKEN)
    assert driver.current_url == f"{console_server.url}/console/signin"
    assert driver.get_cookies() == []


def test_signing_out_ends_the_session(driver: WebDriver, console_server: ConsoleServer) -> None:
    sign_in(driver, console_server, console_server.ids.run)
    session = driver.get_cookie("cirrus_session")
    assert session is not None
    driver.find_element(By.ID, "signout").click()
    WebDriverWait(driver, WAIT_S).until(lambda d: d.current_url.endswith("/console/signin"))
    # The old cookie, replayed, no longer opens anything.
    replayed = httpx.get(
        f"{console_server.url}/console/overview", cookies={"cirrus_session": session["value"]}
    )
    assert replayed.status_code == 303
    assert replayed.headers["location"] == "/console/signin"


def test_forged_state_changing_requests_are_refused(driver: WebDriver, console_server: ConsoleServer) -> None:
    """A request made with the session cookie but without the page's CSRF token: sign-out and the API."""
    sign_in(driver, console_server, console_server.ids.run)
    statuses = driver.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        const csrf = document.querySelector('meta[name="cirrus-csrf"]').content;
        const chat = JSON.stringify({model: "@cf/huggingface/smollm2-135m-instruct",
                                     messages: [{role: "user", content: "Hi"}], max_tokens: 1});
        const post = (url, headers, body) => fetch(url, {method: "POST", headers: headers, body: body})
            .then(r => r.status);
        Promise.all([
            post("/console/signout", {}, ""),
            post("/console/signout", {"X-Cirrus-CSRF": "forged"}, ""),
            post("/v1/chat/completions", {"Content-Type": "application/json"}, chat),
            post("/v1/chat/completions", {"Content-Type": "application/json", "X-Cirrus-CSRF": "forged"}, chat),
            post("/v1/chat/completions", {"Content-Type": "application/json", "X-Cirrus-CSRF": csrf}, chat),
        ]).then(done);
        """
    )
    assert statuses == [403, 403, 403, 403, 200]
    driver.get(f"{console_server.url}/console/overview")  # still signed in: the forgeries changed nothing
    assert driver.current_url.endswith("/console/overview")


def _sign_in_over_http(client: httpx.Client, token: str) -> None:
    answer = client.post("/console/signin", content=f"token={token}")
    assert answer.status_code == 303, answer.text


def test_the_session_cookie_csp_and_log_over_http(console_server: ConsoleServer) -> None:
    """No browser: the cookie's flags, the page's headers, and the token nowhere in the server's log."""
    token = console_server.ids.run
    with httpx.Client(base_url=console_server.url, timeout=30) as client:
        answer = client.post("/console/signin", content=f"token={token}")
        assert answer.status_code == 303
        cookie = answer.headers["set-cookie"]
        assert cookie.startswith("cirrus_session=")
        flags = {flag.strip().lower() for flag in cookie.split(";")[1:]}
        assert {"httponly", "samesite=strict", "path=/"} <= flags
        assert "secure" not in flags  # plain http here; https gets Secure
        assert token not in cookie
        page = client.get("/console/overview")
        assert page.status_code == 200
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert page.headers["x-content-type-options"] == "nosniff"
        assert page.headers["referrer-policy"] == "no-referrer"
        assert "<script>" not in page.text  # no inline script: every script is a file
        assert token not in page.text
    assert token not in console_server.server.log()


def test_revoking_the_token_ends_its_sessions(console_server: ConsoleServer) -> None:
    async def new_token() -> tuple[str, str]:
        db = await open_database(console_server.database_url)
        try:
            secret, info = await IdentityStore(db).create_token(
                console_server.ids.account_a,
                "short-lived",
                permissions=(Permission.RUN, Permission.READ_USAGE),
            )
            return secret, info.id
        finally:
            await db.close()

    async def revoke(token_id: str) -> None:
        db = await open_database(console_server.database_url)
        try:
            await IdentityStore(db).revoke_token(token_id)
        finally:
            await db.close()

    secret, token_id = asyncio.run(new_token())
    with httpx.Client(base_url=console_server.url, timeout=30) as client:
        _sign_in_over_http(client, secret)
        page = client.get("/console/playground")
        assert page.status_code == 200
        csrf = CSRF_META.search(page.text)
        assert csrf is not None
        assert client.get("/v1/models", headers={"X-Cirrus-CSRF": csrf.group(1)}).status_code == 200
        asyncio.run(revoke(token_id))
        assert client.get("/console/playground").headers.get("location") == "/console/signin"
        assert client.get("/v1/models", headers={"X-Cirrus-CSRF": csrf.group(1)}).status_code == 401
