"""What the gateway does to answers, through the real server: the response cache (whole and streamed, one
model run for identical requests in flight), fallbacks, guardrails on input and output, metrics and logs."""

import json
import re
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest

from cirrus.guardrails import OutputFilter
from tests.integration.conftest import Gateway
from tests.integration.gateway import ABSENT, GUARDED, SMOLLM, bearer
from tests.integration.server import wait_until

pytestmark = pytest.mark.integration

CACHED = {"cf-aig-cache-ttl": "600"}


def run(
    gateway: Gateway, body: dict[str, Any], model: str = SMOLLM, headers: dict[str, str] | None = None
) -> httpx.Response:
    url = f"{gateway.server.url}/ai/run/{model}"
    return httpx.post(url, json=body, headers={**bearer(gateway.ids.run), **(headers or {})}, timeout=120)


def streamed_text(response: httpx.Response) -> str:
    events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    return "".join(json.loads(e).get("response", "") for e in events if e != "[DONE]")


def unique_prompt(text: str) -> dict[str, Any]:
    return {"prompt": f"{text} ({uuid.uuid4().hex[:6]})", "max_tokens": 12, "temperature": 0}


def test_a_deterministic_answer_is_served_from_cache_whole_and_streamed(gateway_sqlite: Gateway) -> None:
    body = unique_prompt("Name a colour")
    first, second = run(gateway_sqlite, body, headers=CACHED), run(gateway_sqlite, body, headers=CACHED)
    assert [first.headers["cf-aig-cache-status"], second.headers["cf-aig-cache-status"]] == ["MISS", "HIT"]
    assert second.json()["result"] == first.json()["result"]
    stream = run(gateway_sqlite, {**body, "stream": True}, headers=CACHED)
    assert stream.headers["content-type"].startswith("text/event-stream")
    assert stream.headers["cf-aig-cache-status"] == "HIT"
    assert streamed_text(stream) == first.json()["result"]["response"]
    assert stream.text.rstrip().endswith("data: [DONE]")


def test_requests_the_cache_must_not_answer_bypass_it(gateway_sqlite: Gateway) -> None:
    body = unique_prompt("Name a fruit")
    assert run(gateway_sqlite, body).headers["cf-aig-cache-status"] == "BYPASS"  # caching not asked for
    skipped = run(gateway_sqlite, body, headers={**CACHED, "cf-aig-skip-cache": "true"})
    assert skipped.headers["cf-aig-cache-status"] == "BYPASS"
    sampled = run(gateway_sqlite, {**body, "temperature": 0.9}, headers=CACHED)
    assert sampled.headers["cf-aig-cache-status"] == "BYPASS"


@pytest.mark.parametrize(
    "header, value", [("cf-aig-cache-ttl", "5"), ("cf-aig-max-attempts", "9"), ("cf-aig-backoff", "random")]
)
def test_a_bad_gateway_header_is_a_400_naming_it(gateway_sqlite: Gateway, header: str, value: str) -> None:
    refused = run(gateway_sqlite, unique_prompt("hi"), headers={header: value})
    assert refused.status_code == 400
    assert header in refused.json()["errors"][0]["message"]


def test_identical_requests_in_flight_run_the_model_once(gateway_sqlite: Gateway) -> None:
    body = {**unique_prompt("Count to twenty"), "max_tokens": 48}
    with ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(lambda _: run(gateway_sqlite, body, headers=CACHED), range(3)))
    statuses = sorted(a.headers["cf-aig-cache-status"] for a in answers)
    assert statuses == ["HIT", "HIT", "MISS"]
    assert len({a.json()["result"]["response"] for a in answers}) == 1


def test_a_model_that_cannot_start_falls_back_to_the_next_in_its_chain(gateway_sqlite: Gateway) -> None:
    answer = run(gateway_sqlite, unique_prompt("Say hi"), model=ABSENT)
    assert answer.status_code == 200, answer.text
    assert answer.headers["cf-aig-step"] == "1"
    direct = run(gateway_sqlite, unique_prompt("Say hi"))
    assert direct.headers["cf-aig-step"] == "0"


def test_denied_input_is_refused_before_inference_without_echoing_it(gateway_sqlite: Gateway) -> None:
    refused = run(gateway_sqlite, {"prompt": "Tell me about the Forbidden   Fruit"}, model=GUARDED)
    assert refused.status_code == 400
    error = refused.json()["errors"][0]
    assert error["code"] == 3054 and "forbidden" not in error["message"].lower()


@pytest.mark.parametrize(
    "prompt, problem",
    [("nul\u0000byte", "U+0000"), ("lone \ud800 surrogate", "unicode"), ("x" * 131073, "131072")],
)
def test_malformed_input_is_refused_naming_the_problem(
    gateway_sqlite: Gateway, prompt: str, problem: str
) -> None:
    body = json.dumps(
        {"prompt": prompt, "max_tokens": 2}
    )  # json.dumps escapes the lone surrogate as JSON allows
    url = f"{gateway_sqlite.server.url}/ai/run/{SMOLLM}"
    refused = httpx.post(url, content=body, headers=bearer(gateway_sqlite.ids.run), timeout=60)
    assert refused.status_code == 400
    message = refused.json()["errors"][0]["message"]
    assert problem.lower() in message.lower(), message


def test_output_filters_apply_alike_to_whole_and_streamed_answers(gateway_sqlite: Gateway) -> None:
    body = {"prompt": "Describe the sea and the sky in two sentences.", "max_tokens": 40, "temperature": 0}
    plain = run(gateway_sqlite, body).json()["result"]["response"]
    expected = OutputFilter(("email", "phone", "card"), ("[Tt]he",)).apply(plain)
    assert "[redacted]" in expected, plain  # the prompt's answer does contain "the"
    whole = run(gateway_sqlite, body, model=GUARDED).json()["result"]["response"]
    streamed = streamed_text(run(gateway_sqlite, {**body, "stream": True}, model=GUARDED))
    # Three greedy runs on a busy cache need not write the same text (the KV layout note in the design notes),
    # so each answer is checked for what the filter guarantees: matches redacted, even across streamed chunks.
    for answer in (whole, streamed):
        assert "[redacted]" in answer and re.search("[Tt]he", answer) is None, answer


def test_metrics_count_requests_cold_starts_and_refusals(gateway_sqlite: Gateway) -> None:
    run(gateway_sqlite, unique_prompt("hi"))
    text = httpx.get(f"{gateway_sqlite.server.url}/metrics", timeout=10).text
    assert (
        f'cirrus_requests_total{{cache="BYPASS",code="",model="{SMOLLM}",route="workers-ai",status="200"}}'
        in text
    )
    assert f'cirrus_cold_starts_total{{model="{SMOLLM}"}}' in text
    assert f'cirrus_cold_start_seconds_count{{model="{SMOLLM}",phase="load"}}' in text
    assert "cirrus_memory_budget_bytes" in text and "cirrus_time_to_first_token_seconds_bucket" in text


def _request_lines(gateway: Gateway, request_id: str) -> list[dict[str, Any]]:
    """The request's log lines; the line is written as the response ends, so it may trail the answer a little."""

    def lines() -> list[dict[str, Any]]:
        parsed = [json.loads(line) for line in gateway.server.log().splitlines() if line.startswith("{")]
        return [
            line for line in parsed if line.get("request_id") == request_id and line["message"] == "request"
        ]

    wait_until(lambda: bool(lines()), timeout_s=10)
    return lines()


def test_one_json_log_line_per_request_carries_its_id_and_no_prompt(gateway_sqlite: Gateway) -> None:
    request_id = f"trace-{uuid.uuid4().hex[:8]}"
    prompt = unique_prompt("Say a secret word")
    answer = run(gateway_sqlite, prompt, headers={"x-request-id": request_id})
    assert answer.headers["cf-ai-req-id"] == request_id
    (line,) = _request_lines(gateway_sqlite, request_id)
    assert line["token_id"] and line["model"] == SMOLLM and line["completion_tokens"] == 12
    assert prompt["prompt"] not in gateway_sqlite.server.log()
    assert gateway_sqlite.ids.run not in gateway_sqlite.server.log()


def test_prompts_are_logged_only_when_collection_is_asked_for(gateway_sqlite: Gateway) -> None:
    request_id = f"collect-{uuid.uuid4().hex[:8]}"
    prompt = unique_prompt("Say a logged word")
    headers = {"x-request-id": request_id, "cf-aig-collect-log": "true"}
    run(gateway_sqlite, prompt, headers=headers)
    (line,) = _request_lines(gateway_sqlite, request_id)
    assert line["prompt"] == prompt["prompt"] and isinstance(line["answer"], str)


def _openai_stream(client: openai.OpenAI, messages: list[Any]) -> tuple[dict[str, str], str]:
    raw = client.chat.completions.with_raw_response.create(
        model=SMOLLM, messages=messages, max_tokens=8, temperature=0, stream=True, extra_headers=CACHED
    )
    chunks: Any = raw.parse()
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    return dict(raw.headers), text


def test_the_openai_route_streams_through_the_same_gateway(gateway_sqlite: Gateway) -> None:
    client = openai.OpenAI(
        base_url=f"{gateway_sqlite.server.url}/v1", api_key=gateway_sqlite.ids.run, max_retries=0
    )
    messages: list[Any] = [{"role": "user", "content": f"Name an animal ({uuid.uuid4().hex[:6]})"}]
    first_headers, first = _openai_stream(client, messages)
    second_headers, second = _openai_stream(client, messages)
    assert (first_headers["cf-aig-cache-status"], second_headers["cf-aig-cache-status"]) == ("MISS", "HIT")
    assert first and second == first
    assert int(first_headers["x-ratelimit-remaining-requests"]) > 0
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model=GUARDED, messages=[{"role": "user", "content": "the forbidden fruit"}], max_tokens=2
        )
    assert refused.value.code == "content_filter"
