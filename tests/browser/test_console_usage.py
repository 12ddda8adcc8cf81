"""The Usage page in a browser: requests made with a fresh account's token show in its chart, totals, table and
CSV; an admin may pick that account, anyone else may read only their own."""

import asyncio
import time
import uuid
from dataclasses import dataclass

import httpx
import pytest
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

from cirrus.auth import Permission
from cirrus.auth.store import IdentityStore, Plan
from cirrus.db import open_database
from tests.browser.conftest import WAIT_S, ConsoleServer, page_errors, screenshot, sign_in
from tests.integration.gateway import SMOLLM, bearer

pytestmark = pytest.mark.integration
REQUESTS = 3


@dataclass(frozen=True)
class Member:
    """A fresh account with one token, so what its pages show is exactly what the test did."""

    account_id: str
    token_id: str
    secret: str


def new_member(server: ConsoleServer, monthly_limit_usd: float | None = None) -> Member:
    async def create() -> Member:
        db = await open_database(server.database_url)
        try:
            store = IdentityStore(db)
            account = await store.create_account(f"browser-{uuid.uuid4().hex[:8]}", Plan.PAID)
            secret, token = await store.create_token(
                account.id,
                "browser",
                permissions=(Permission.RUN, Permission.READ_USAGE),
                monthly_spend_limit_usd=monthly_limit_usd,
            )
            return Member(account.id, token.id, secret)
        finally:
            await db.close()

    return asyncio.run(create())


def run_model(server: ConsoleServer, secret: str, request_id: str | None = None) -> httpx.Response:
    headers = {**bearer(secret), **({"x-request-id": request_id} if request_id else {})}
    answer = httpx.post(
        f"{server.url}/ai/run/{SMOLLM}",
        json={"prompt": "Say hello", "max_tokens": 4},
        headers=headers,
        timeout=120,
    )
    assert answer.status_code == 200, answer.text
    return answer


def reload_until(driver: WebDriver, url: str, find: str) -> WebElement:
    """Usage is written in batches within a second of each answer: reload the server-rendered page until the
    CSS selector matches."""
    deadline = time.monotonic() + WAIT_S
    while True:
        driver.get(url)
        found = driver.find_elements(By.CSS_SELECTOR, find)
        if found or time.monotonic() > deadline:
            assert found, f"{find} never appeared on {url}"
            return found[0]
        time.sleep(0.3)


def session_cookie(driver: WebDriver) -> dict[str, str]:
    cookie = driver.get_cookie("cirrus_session")
    assert cookie is not None
    return {"cirrus_session": cookie["value"]}


def real_errors(driver: WebDriver) -> list[str]:
    return [message for message in page_errors(driver) if "favicon.ico" not in message]


def test_requests_show_in_the_chart_table_and_csv(driver: WebDriver, console_server: ConsoleServer) -> None:
    member = new_member(console_server, monthly_limit_usd=5.0)
    for _ in range(REQUESTS):
        run_model(console_server, member.secret)
    sign_in(driver, console_server, member.secret)

    row = reload_until(
        driver,
        f"{console_server.url}/console/usage",
        f'tr.usage-row[data-model="{SMOLLM}"][data-requests="{REQUESTS}"]',
    )
    assert row.get_attribute("data-day") == time.strftime("%Y-%m-%d", time.gmtime())
    assert driver.find_element(By.ID, "total-requests").text == str(REQUESTS)
    bars = driver.find_elements(By.CSS_SELECTOR, "#requests-chart rect.bar")
    assert [(b.get_attribute("data-series"), b.get_attribute("data-value")) for b in bars] == [
        (SMOLLM, str(REQUESTS))
    ]
    legend = driver.find_elements(By.CSS_SELECTOR, "#requests-chart .legend-item")
    assert [item.text for item in legend] == [SMOLLM]
    assert driver.find_elements(By.CSS_SELECTOR, "#allocation svg.gauge")
    assert len(driver.find_elements(By.CSS_SELECTOR, "#token-limits svg.gauge")) == 1
    screenshot(driver, "usage")
    assert real_errors(driver) == []

    csv_path = driver.find_element(By.ID, "usage-csv").get_attribute("href")
    assert csv_path is not None
    export = httpx.get(csv_path, cookies=session_cookie(driver), timeout=30)
    assert export.status_code == 200
    assert export.headers["content-type"].startswith("text/csv")
    header, *lines = export.text.splitlines()
    assert header.startswith("day,model,token_id,requests,errors,cache_hits")
    assert [line.split(",")[1:4] for line in lines] == [[SMOLLM, member.token_id, str(REQUESTS)]]


def test_an_admin_picks_an_account_and_others_may_not(
    driver: WebDriver, console_server: ConsoleServer
) -> None:
    member = new_member(console_server)
    run_model(console_server, member.secret)

    sign_in(driver, console_server, console_server.ids.admin)
    reload_until(
        driver,
        f"{console_server.url}/console/usage?account={member.account_id}",
        f'tr.usage-row[data-model="{SMOLLM}"][data-requests="1"]',
    )
    options = driver.find_elements(By.CSS_SELECTOR, "#f-account option")
    assert member.account_id in [option.get_attribute("value") for option in options]

    driver.delete_all_cookies()
    sign_in(driver, console_server, console_server.ids.run)  # account A, no admin
    assert driver.find_elements(By.ID, "f-account") == []
    for path in (
        f"/console/usage?account={member.account_id}",
        f"/console/usage.csv?account={member.account_id}",
    ):
        answer = httpx.get(console_server.url + path, cookies=session_cookie(driver), timeout=30)
        assert answer.status_code == 403, path
    own = httpx.get(
        f"{console_server.url}/console/usage?since=bad", cookies=session_cookie(driver), timeout=30
    )
    assert own.status_code == 400
    assert "YYYY-MM-DD" in own.text
