"""The Keys page in a browser: an admin creates a token, sees its secret once, the API takes it, the admin
revokes it and the API refuses it; a token without admin gets 403."""

import uuid

import httpx
import pytest
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait

from tests.browser.conftest import WAIT_S, ConsoleServer, screenshot, sign_in
from tests.browser.test_console_usage import real_errors, session_cookie
from tests.integration.gateway import SMOLLM, bearer

pytestmark = pytest.mark.integration


def call_api(server: ConsoleServer, secret: str) -> int:
    answer = httpx.post(
        f"{server.url}/ai/run/{SMOLLM}",
        json={"prompt": "Hi", "max_tokens": 2},
        headers=bearer(secret),
        timeout=120,
    )
    return answer.status_code


def test_create_see_once_use_revoke(driver: WebDriver, console_server: ConsoleServer) -> None:
    sign_in(driver, console_server, console_server.ids.admin)
    driver.get(f"{console_server.url}/console/keys")
    name = f"colleague-{uuid.uuid4().hex[:6]}"
    driver.find_element(By.ID, "t-name").send_keys(name)
    driver.find_element(By.ID, "t-limit").send_keys("5")
    driver.find_element(By.ID, "create-token-button").click()

    secret_box = WebDriverWait(driver, WAIT_S).until(lambda d: d.find_element(By.ID, "new-secret"))
    secret = secret_box.text
    token_id = driver.find_element(By.ID, "new-token-id").text
    assert secret.startswith("cirrus_")
    assert driver.find_element(By.ID, "copy-secret").is_displayed()
    row = driver.find_element(By.CSS_SELECTOR, f'tr.token-row[data-token-id="{token_id}"]')
    assert row.get_attribute("data-state") == "active"
    assert name in row.text and "$5" in row.text
    screenshot(driver, "keys")
    assert real_errors(driver) == []

    assert call_api(console_server, secret) == 200

    driver.get(f"{console_server.url}/console/keys")  # shown once: never again
    assert secret not in driver.page_source
    driver.get(
        f"{console_server.url}/console/keys?revoked={token_id}&error=forged"
    )  # a crafted link claims nothing
    assert driver.find_elements(By.ID, "keys-notice") == driver.find_elements(By.ID, "keys-error") == []
    driver.find_element(By.CSS_SELECTOR, f'tr.token-row[data-token-id="{token_id}"] .revoke-button').click()
    WebDriverWait(driver, WAIT_S).until(lambda d: d.find_elements(By.ID, "keys-notice"))
    row = driver.find_element(By.CSS_SELECTOR, f'tr.token-row[data-token-id="{token_id}"]')
    assert row.get_attribute("data-state") == "revoked"
    assert row.find_elements(By.CSS_SELECTOR, ".revoke-button") == []

    assert call_api(console_server, secret) == 401  # the server runs without an authentication cache


def test_a_bad_form_says_why_and_creates_nothing(driver: WebDriver, console_server: ConsoleServer) -> None:
    sign_in(driver, console_server, console_server.ids.admin)
    driver.get(f"{console_server.url}/console/keys")
    before = len(driver.find_elements(By.CSS_SELECTOR, "tr.token-row"))
    driver.find_element(By.ID, "t-name").send_keys("bad-expiry")
    driver.find_element(By.ID, "t-expires").send_keys("soon")
    driver.find_element(By.ID, "create-token-button").click()
    error = WebDriverWait(driver, WAIT_S).until(lambda d: d.find_element(By.ID, "keys-error"))
    assert "soon" in error.text
    assert driver.find_elements(By.ID, "new-secret") == []
    assert len(driver.find_elements(By.CSS_SELECTOR, "tr.token-row")) == before


def test_a_token_without_admin_gets_403(driver: WebDriver, console_server: ConsoleServer) -> None:
    sign_in(driver, console_server, console_server.ids.run)
    cookies = session_cookie(driver)
    page = httpx.get(f"{console_server.url}/console/keys", cookies=cookies, timeout=30)
    assert page.status_code == 403
    driver.get(f"{console_server.url}/console/keys")
    assert driver.find_element(By.ID, "error-message").text.startswith(
        "This page needs a token with the admin"
    )
    csrf = driver.find_element(By.CSS_SELECTOR, 'meta[name="cirrus-csrf"]').get_attribute("content")
    forged = httpx.post(
        f"{console_server.url}/console/keys/tokens",
        content=f"csrf={csrf}&account={console_server.ids.account_a}&name=sneaky&perm_admin=on",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        cookies=cookies,
        timeout=30,
    )
    assert forged.status_code == 403
    assert "cirrus_" not in forged.text
