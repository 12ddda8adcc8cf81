"""The Logs page in a browser: a request made in the test is listed with its metered fields, filters narrow
the list, and its request id opens its record; the prompt is nowhere on either page."""

import uuid

import pytest
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait

from tests.browser.conftest import WAIT_S, ConsoleServer, screenshot, sign_in
from tests.browser.test_console_usage import new_member, real_errors, reload_until, run_model
from tests.integration.gateway import SMOLLM

pytestmark = pytest.mark.integration


def test_a_request_is_listed_and_opens_its_record(driver: WebDriver, console_server: ConsoleServer) -> None:
    member = new_member(console_server)
    request_id = f"browser-logs-{uuid.uuid4().hex[:12]}"
    run_model(console_server, member.secret, request_id)
    sign_in(driver, console_server, member.secret)

    row = reload_until(
        driver, f"{console_server.url}/console/logs", f'tr.log-row[data-request-id="{request_id}"]'
    )
    assert row.get_attribute("data-model") == SMOLLM
    assert row.get_attribute("data-status") == "200"
    assert "Say hello" not in driver.page_source  # prompts are never shown
    screenshot(driver, "logs")
    assert real_errors(driver) == []

    driver.get(f"{console_server.url}/console/logs?status=error")
    assert driver.find_elements(By.CSS_SELECTOR, "tr.log-row") == []
    assert driver.find_element(By.ID, "no-logs").is_displayed()
    driver.get(f"{console_server.url}/console/logs?model={SMOLLM}&status=200")
    assert [
        r.get_attribute("data-request-id") for r in driver.find_elements(By.CSS_SELECTOR, "tr.log-row")
    ] == [request_id]

    driver.find_element(By.CSS_SELECTOR, f'tr.log-row[data-request-id="{request_id}"] a.request-link').click()
    WebDriverWait(driver, WAIT_S).until(lambda d: d.find_elements(By.ID, "record-request-id"))
    assert driver.find_element(By.ID, "record-request-id").text == request_id
    assert driver.find_element(By.CSS_SELECTOR, ".record-model").text == SMOLLM
    assert driver.find_element(By.CSS_SELECTOR, ".record-status").text == "200"
    assert driver.find_element(By.CSS_SELECTOR, ".record-ttft").text.endswith(("ms", " s"))
    assert "Say hello" not in driver.page_source
    screenshot(driver, "log_record")
    assert real_errors(driver) == []


def test_another_accounts_request_is_not_found(driver: WebDriver, console_server: ConsoleServer) -> None:
    member = new_member(console_server)
    request_id = f"browser-private-{uuid.uuid4().hex[:12]}"
    run_model(console_server, member.secret, request_id)
    sign_in(driver, console_server, console_server.ids.run)  # account A
    driver.get(f"{console_server.url}/console/logs/{request_id}")
    assert driver.find_element(By.ID, "record-missing").is_displayed()
    assert driver.find_elements(By.CSS_SELECTOR, "section.record") == []
