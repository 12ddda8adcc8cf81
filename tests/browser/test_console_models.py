"""The Models page in a browser: the catalog with install state and prices; an admin loads and unloads a model
through the same code as /admin/models/.../load; a token without admin sees no such buttons."""

import httpx
import pytest
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait

from tests.browser.conftest import WAIT_S, ConsoleServer, screenshot, sign_in
from tests.browser.test_console_usage import real_errors, session_cookie
from tests.integration.gateway import ABSENT, GUARDED, SMOLLM, bearer

pytestmark = pytest.mark.integration


def model_row(driver: WebDriver, model: str) -> str:
    return f'tr.model-row[data-model="{model}"]'


def test_the_catalog_with_install_state_and_prices(driver: WebDriver, console_server: ConsoleServer) -> None:
    sign_in(driver, console_server, console_server.ids.run)
    driver.get(f"{console_server.url}/console/models")
    row = driver.find_element(By.CSS_SELECTOR, model_row(driver, SMOLLM))
    assert row.get_attribute("data-installed") == "true"
    assert row.find_element(By.CSS_SELECTOR, ".install-state").text == "installed"
    assert "input $10.00" in row.text and "909,091 neurons" in row.text  # $10 per million = 909,091 neurons
    absent = driver.find_element(By.CSS_SELECTOR, model_row(driver, ABSENT))
    assert absent.get_attribute("data-installed") == "false"
    assert driver.find_elements(By.CSS_SELECTOR, ".load-button") == []  # no admin, no buttons
    assert real_errors(driver) == []


def test_an_admin_loads_and_unloads_a_model(driver: WebDriver, console_server: ConsoleServer) -> None:
    sign_in(driver, console_server, console_server.ids.admin)
    driver.get(f"{console_server.url}/console/models")
    driver.find_element(By.CSS_SELECTOR, f"{model_row(driver, GUARDED)} .load-button").click()
    WebDriverWait(driver, WAIT_S).until(lambda d: "loaded=" in d.current_url)  # the page after the POST
    notice = driver.find_element(By.ID, "models-notice")
    assert notice.text == f"Loaded {GUARDED}."
    states = driver.find_elements(By.CSS_SELECTOR, f"{model_row(driver, GUARDED)} .instance-state")
    assert [s.text for s in states] == ["1 ready"]
    admin = bearer(console_server.ids.admin)
    running = httpx.get(f"{console_server.url}/admin/instances", headers=admin, timeout=30).json()
    assert GUARDED in [i["model"] for i in running["result"]["instances"]]
    screenshot(driver, "models")
    assert real_errors(driver) == []

    driver.find_element(By.CSS_SELECTOR, f"{model_row(driver, GUARDED)} .unload-button").click()
    # Not the notice alone: the page being left has one too ("Loaded ..."), found before the next page arrives.
    WebDriverWait(driver, WAIT_S).until(lambda d: "unloaded=" in d.current_url)
    notice = driver.find_element(By.ID, "models-notice")
    assert notice.text.startswith(f"Unloaded the idle instances of {GUARDED}")
    running = httpx.get(f"{console_server.url}/admin/instances", headers=admin, timeout=30).json()
    assert GUARDED not in [i["model"] for i in running["result"]["instances"]]


def test_loading_without_the_csrf_token_is_refused(driver: WebDriver, console_server: ConsoleServer) -> None:
    sign_in(driver, console_server, console_server.ids.admin)
    answer = httpx.post(
        f"{console_server.url}/console/models/{SMOLLM}/load",
        content="csrf=forged",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        cookies=session_cookie(driver),
        timeout=30,
    )
    assert answer.status_code == 403
