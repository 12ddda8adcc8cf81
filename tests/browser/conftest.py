"""Browser tests of the console: a real `cirrus serve` with real tokens, driven by Debian's chromium through its
chromium-driver (Selenium), headless.

Skipped, with the reason, only where chromium is not installed and this is not CI; under CI (`CI=true`) a missing
browser fails them. `scripts/bootstrap.sh --test-services` installs `chromium` and `chromium-driver`.
"""

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options as ChromeOptions
from selenium.webdriver.chrome.service import Service as ChromeService
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait

from cirrus.families.registry import family
from cirrus.testing.scripted import write_scripted
from cirrus.testing.scripts import REASONING
from tests.integration.gateway import CATALOG, Identities, provision
from tests.integration.minilm import MINILM, convert_minilm
from tests.integration.server import Server, running_server

pytestmark = pytest.mark.integration

CHROMIUM = "chromium"
CHROMEDRIVER = "chromedriver"
WAIT_S = 30.0
# A GLM-4.7-shaped checkpoint that reasons, then answers with markup: the console must show it as text.
SCRIPTED = "@cf/test/glm-4.7-says-script"
SCRIPT_ANSWER = "<script>window.pwned=1</script> <b>bold?</b>"
_SCRIPT = (
    *("The", " user", " asks", " about", " the", " weather"),
    "</think>",
    *("<script>", "window.pwned=1", "</script>", " <b>", "bold?", "</b>"),
    "<|user|>",
)
assert "".join(_SCRIPT[:6]) == REASONING


class HasUrl(Protocol):
    @property
    def url(self) -> str: ...


@dataclass(frozen=True)
class ConsoleServer:
    """A gateway with tokens (so the console asks to sign in), its identities, and its database."""

    server: Server
    ids: Identities
    database_url: str

    @property
    def url(self) -> str:
        return self.server.url


def browser_missing() -> str | None:
    missing = [name for name in (CHROMIUM, CHROMEDRIVER) if shutil.which(name) is None]
    if not missing:
        return None
    return f"{' and '.join(missing)} not installed (scripts/bootstrap.sh --test-services installs them)"


@pytest.fixture(scope="session")
def browser_available() -> None:
    reason = browser_missing()
    if reason is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"the browser tests must run under CI: {reason}")
    pytest.skip(reason)


def _catalog(directory: Path) -> Path:
    scripted = write_scripted(
        "deepseek2-glm", directory / "glm47-script.gguf", template=family("glm47").template(), script=_SCRIPT
    )
    minilm = convert_minilm(directory / "minilm-f16.gguf")
    extra = (
        f'\n[[models]]\nid = "{SCRIPTED}"\nartifact = {{ path = "{scripted}" }}\ncontext_window = 512\n'
        "parallel = 2\nkv_cache_tokens = 1024\n"
        f'\n[[models]]\nid = "{MINILM}"\ntask = "text-embeddings"\nartifact = {{ path = "{minilm}" }}\n'
    )
    path = directory / "console-catalog.toml"
    path.write_text(CATALOG + extra)
    return path


@pytest.fixture(scope="session")
def console_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleServer]:
    directory = tmp_path_factory.mktemp("console")
    database_url = str(directory / "cirrus.db")
    ids = provision(database_url)
    catalog = _catalog(directory)
    # No authentication cache, so a revoked token takes effect at once.
    with running_server(
        directory, "--catalog", str(catalog), database=database_url, auth_cache_ttl_s="0"
    ) as running:
        yield ConsoleServer(running, ids, database_url)


def chrome() -> WebDriver:
    options = ChromeOptions()
    options.binary_location = shutil.which(CHROMIUM) or CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # these machines run the tests as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1000",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = ChromeService(executable_path=shutil.which(CHROMEDRIVER) or CHROMEDRIVER)
    return webdriver.Chrome(options=options, service=service)


@pytest.fixture
def driver(browser_available: None) -> Iterator[WebDriver]:
    """A fresh browser (no cookies) for each test."""
    browser = chrome()
    try:
        yield browser
    finally:
        browser.quit()


def sign_in(driver: WebDriver, server: HasUrl, token: str) -> None:
    """Through the sign-in form, as a person would; returns on the Overview."""
    driver.get(f"{server.url}/console/signin")
    field = driver.find_element(By.ID, "token")
    field.send_keys(token)
    driver.find_element(By.ID, "signin").click()
    WebDriverWait(driver, WAIT_S).until(lambda d: d.current_url.endswith("/console/overview"))


def screenshot(driver: WebDriver, name: str) -> Path:
    """A PNG under $CIRRUS_SCREENSHOTS (else the system's temporary directory), named after the page."""
    directory = Path(
        os.environ.get("CIRRUS_SCREENSHOTS") or Path(tempfile.gettempdir()) / "cirrus-screenshots"
    )
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.png"
    assert driver.save_screenshot(str(path)), f"could not save {path}"
    return path


def page_errors(driver: WebDriver) -> list[str]:
    """What the page's console logged as errors since the last call (a CSP violation, a script error)."""
    entries: list[dict[str, str]] = driver.get_log("browser")  # type: ignore[no-untyped-call]
    return [entry["message"] for entry in entries if entry["level"] == "SEVERE"]
