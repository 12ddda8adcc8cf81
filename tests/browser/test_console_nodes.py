"""The Nodes page in a browser: an admin sees this node's memory against its budget, the models cached on it and
a warm instance of a model it just loaded; a token without admin is refused and has no Nodes link."""

import httpx
import pytest
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By

from tests.browser.conftest import ConsoleServer, screenshot, sign_in
from tests.browser.test_console_usage import real_errors
from tests.integration.gateway import SMOLLM, bearer

pytestmark = pytest.mark.integration


def test_an_admin_sees_the_node_its_cached_models_and_warm_instances(
    driver: WebDriver, console_server: ConsoleServer
) -> None:
    loaded = httpx.post(
        f"{console_server.url}/admin/models/{SMOLLM}/load",
        headers=bearer(console_server.ids.admin),
        timeout=120,
    )
    assert loaded.status_code == 200, loaded.text
    sign_in(driver, console_server, console_server.ids.admin)
    driver.get(f"{console_server.url}/console/nodes")
    node = driver.find_element(By.CSS_SELECTOR, "section.node")
    assert node.get_attribute("data-alive") == "true"
    cached = [e.text for e in node.find_elements(By.CSS_SELECTOR, ".cached-model")]
    assert SMOLLM in cached
    warm = node.find_elements(By.CSS_SELECTOR, f'.node-instance[data-model="{SMOLLM}"]')
    assert warm and "slots busy" in warm[0].text
    memory = float(node.find_element(By.CSS_SELECTOR, "meter.node-memory").get_attribute("value") or "0")
    assert 0 < memory <= 1  # the loaded instance counts against the budget
    screenshot(driver, "nodes")
    assert real_errors(driver) == []


def test_a_token_without_admin_gets_no_nodes(driver: WebDriver, console_server: ConsoleServer) -> None:
    sign_in(driver, console_server, console_server.ids.run)
    assert driver.find_elements(By.CSS_SELECTOR, 'nav a[href="/console/nodes"]') == []
    driver.get(f"{console_server.url}/console/nodes")
    assert "admin permission" in driver.find_element(By.TAG_NAME, "main").text
