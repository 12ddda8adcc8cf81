"""The playground: a prompt streams over the real API route and shows its figures; model output is text, never
markup; the "copy as" snippets replay the exact request; the embeddings tab says when it has no model."""

import json
import os
import re
import sqlite3
import subprocess
import sys
from typing import Any

import pytest
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.wait import WebDriverWait

from cirrus.testing.scripts import REASONING
from tests.browser.conftest import (
    SCRIPT_ANSWER,
    SCRIPTED,
    WAIT_S,
    ConsoleServer,
    page_errors,
    screenshot,
    sign_in,
)
from tests.integration.gateway import SMOLLM

pytestmark = pytest.mark.integration
# Records every change of the answer's text, so "it streamed" does not depend on how fast Selenium polls.
WATCH_THE_ANSWER = """
window.answerLengths = [];
new MutationObserver(function () {
  const text = document.querySelector(".turn.assistant:last-of-type .text");
  if (text) window.answerLengths.push(text.textContent.length);
}).observe(document.getElementById("transcript"), {subtree: true, characterData: true, childList: true});
"""


def open_playground(driver: WebDriver, server: ConsoleServer, token: str) -> None:
    sign_in(driver, server, token)
    driver.get(f"{server.url}/console/playground")


def send(driver: WebDriver, prompt: str, model: str, max_tokens: int) -> WebElement:
    """Send a prompt; return the answer's turn once it has ended and been metered."""
    Select(driver.find_element(By.ID, "model")).select_by_value(model)
    tokens = driver.find_element(By.ID, "max-tokens")
    tokens.clear()
    tokens.send_keys(str(max_tokens))
    driver.find_element(By.ID, "prompt").send_keys(prompt)
    driver.find_element(By.ID, "send").click()
    turn: WebElement = WebDriverWait(driver, WAIT_S).until(
        lambda d: d.find_element(By.CSS_SELECTOR, '.turn.assistant[data-metered="yes"]')
    )
    return turn


def figures(turn: WebElement) -> dict[str, str]:
    items = turn.find_elements(By.CSS_SELECTOR, "[data-figure]")
    return {
        item.get_attribute("data-figure") or "": item.find_element(By.TAG_NAME, "b").text for item in items
    }


def usage_record(server: ConsoleServer, request_id: str) -> dict[str, Any]:
    with sqlite3.connect(server.database_url) as db:
        db.row_factory = sqlite3.Row
        row = db.execute("SELECT * FROM usage_events WHERE request_id = ?", (request_id,)).fetchone()
    assert row is not None, f"no usage record for {request_id}"
    return dict(row)


def test_a_prompt_streams_then_shows_its_figures(driver: WebDriver, console_server: ConsoleServer) -> None:
    open_playground(driver, console_server, console_server.ids.run)
    driver.execute_script(WATCH_THE_ANSWER)
    turn = send(driver, "Tell me a long story about a dragon and a knight.", SMOLLM, 96)
    assert turn.get_attribute("data-state") == "done"
    lengths = [n for n in driver.execute_script("return window.answerLengths;") if n > 0]
    assert len(set(lengths)) >= 2, f"the answer arrived in one piece: {lengths}"
    assert lengths == sorted(lengths)  # it only grew
    answer = turn.find_element(By.CSS_SELECTOR, ".text").get_attribute("textContent") or ""
    assert answer.strip() and len(answer) == lengths[-1]

    shown = figures(turn)
    record = usage_record(console_server, shown["request-id"])
    assert shown["ttft"].endswith(("ms", " s"))
    assert int(shown["prompt-tokens"].replace(",", "")) == record["prompt_tokens"]
    assert int(shown["completion-tokens"].replace(",", "")) == record["completion_tokens"]
    assert int(shown["cached-tokens"].replace(",", "")) == record["cached_tokens"]
    assert float(shown["neurons"]) == pytest.approx(record["neurons"], abs=1e-3)
    assert float(shown["cost"].lstrip("$")) == pytest.approx(record["cost_usd"], abs=1e-8)
    assert shown["cache-status"] == record["cache_status"]
    assert float(shown["tokens-per-second"]) > 0
    assert record["stream"] == 1 and record["route"] == "openai"
    screenshot(driver, "playground")
    assert page_errors(driver) == []


def test_a_model_answer_with_markup_is_shown_as_text(
    driver: WebDriver, console_server: ConsoleServer
) -> None:
    open_playground(driver, console_server, console_server.ids.run)
    turn = send(driver, "What is the weather in Paris?", SCRIPTED, 64)
    text = turn.find_element(By.CSS_SELECTOR, ".text")
    assert text.get_attribute("textContent") == SCRIPT_ANSWER
    assert text.find_elements(By.XPATH, ".//*") == []  # no element came out of the answer
    assert driver.execute_script("return window.pwned === undefined;")
    reasoning = turn.find_element(By.CSS_SELECTOR, ".reasoning")
    assert reasoning.is_displayed()
    assert reasoning.text == REASONING  # the family's reasoning, shown apart from the answer
    assert page_errors(driver) == []


def snippet(driver: WebDriver, turn: WebElement, kind: str) -> str:
    turn.find_element(By.CSS_SELECTOR, f'[data-snippet="{kind}"]').click()
    code = turn.find_element(By.CSS_SELECTOR, "pre.snippet")
    WebDriverWait(driver, WAIT_S).until(lambda d: code.is_displayed())
    return code.get_attribute("textContent") or ""


def run_snippet(command: list[str], code: str, token: str) -> str:
    environment = {**os.environ, "CIRRUS_API_TOKEN": token}
    done = subprocess.run(
        [*command, code], env=environment, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_copy_as_replays_the_exact_request(driver: WebDriver, console_server: ConsoleServer) -> None:
    open_playground(driver, console_server, console_server.ids.run)
    driver.find_element(By.ID, "system").send_keys("Answer in one sentence.")
    driver.find_element(By.ID, "seed").send_keys("7")
    turn = send(driver, "Name a colour.", SMOLLM, 16)
    token = console_server.ids.run

    curl = snippet(driver, turn, "curl")
    body = curl_body(driver, turn)
    assert body["model"] == SMOLLM and body["seed"] == 7 and body["max_tokens"] == 16 and body["stream"]
    assert body["messages"] == [
        {"role": "system", "content": "Answer in one sentence."},
        {"role": "user", "content": "Name a colour."},
    ]
    assert "data: [DONE]" in run_snippet(["bash", "-c"], curl, token)

    python = [sys.executable, "-c"]
    assert run_snippet(python, snippet(driver, turn, "openai"), token).strip()
    assert "response" in run_snippet(python, snippet(driver, turn, "cloudflare"), token)


def curl_body(driver: WebDriver, turn: WebElement) -> dict[str, Any]:
    found = re.search(r"-d '(.*)'$", snippet(driver, turn, "curl"), re.S)
    assert found is not None
    body: dict[str, Any] = json.loads(found.group(1))
    return body


def test_json_mode_and_tools_go_into_the_request(driver: WebDriver, console_server: ConsoleServer) -> None:
    open_playground(driver, console_server, console_server.ids.run)
    driver.find_element(By.ID, "json-mode").click()
    json_turn = send(driver, "Give me a JSON object with a colour.", SMOLLM, 24)
    assert json_turn.get_attribute("data-state") == "done"
    assert curl_body(driver, json_turn)["response_format"] == {"type": "json_object"}
    driver.find_element(By.ID, "json-mode").click()
    driver.find_element(By.ID, "tools").click()
    driver.find_element(By.ID, "clear").click()
    tools_turn = send(driver, "What is the weather in Paris?", SMOLLM, 24)
    assert tools_turn.get_attribute("data-state") == "done"
    body = curl_body(driver, tools_turn)
    assert [tool["function"]["name"] for tool in body["tools"]] == ["get_weather"]
    assert "response_format" not in body


def test_the_embeddings_tab_shows_the_similarity_matrix(
    driver: WebDriver, console_server: ConsoleServer
) -> None:
    open_playground(driver, console_server, console_server.ids.run)
    driver.find_element(By.ID, "tab-embeddings").click()
    texts = driver.find_element(By.ID, "embedding-texts")
    texts.clear()
    texts.send_keys("The cat sits on the mat.\nA kitten rests on a rug.\nStock markets fell sharply today.")
    driver.find_element(By.ID, "embed").click()
    WebDriverWait(driver, WAIT_S).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#similarity td"))
    rows = driver.find_elements(By.CSS_SELECTOR, "#similarity tr")[1:]
    matrix = [
        [
            float(cell.get_attribute("data-similarity") or "nan")
            for cell in row.find_elements(By.TAG_NAME, "td")
        ]
        for row in rows
    ]
    assert len(matrix) == 3 and all(len(row) == 3 for row in matrix)
    assert all(matrix[i][i] == pytest.approx(1.0, abs=1e-4) for i in range(3))
    assert matrix[0][1] == pytest.approx(matrix[1][0])
    assert matrix[0][1] > matrix[0][2]  # the cat is nearer the kitten than the stock market
    screenshot(driver, "playground-embeddings")
    assert page_errors(driver) == []
