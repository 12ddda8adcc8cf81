"""Fine-tunes served through the real server, with an adapter trained on this machine (answers begin "Ahoy,
matey!"): `lora` on `/ai/run` and `BASE:FINETUNE` with the `openai` SDK give the adapter's behaviour and requests
without it do not, also in the same batch and for the same prompt (the response cache keeps them apart); another
account cannot use the fine-tune."""

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.integration.gateway import Identities, bearer, provision
from tests.integration.lora import UNSEEN_PROMPTS, LoraAdapter
from tests.integration.server import Server, running_server, wait_until

pytestmark = pytest.mark.integration

SMOLLM = "@cf/huggingface/smollm2-135m-instruct"


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, smollm2_lora: LoraAdapter
) -> Iterator[tuple[Identities, Server]]:
    directory = tmp_path_factory.mktemp("lora-serving")
    database = str(directory / "cirrus.db")
    ids = provision(database)
    with running_server(
        directory, database=database, auth_cache_ttl_s="0", cache_dir=str(directory / "cache")
    ) as server:
        upload_finetune(server, ids.run, smollm2_lora)
        yield ids, server


def upload_finetune(server: Server, token: str, adapter: LoraAdapter) -> None:
    with httpx.Client(base_url=server.url, headers=bearer(token), timeout=300) as client:
        created = client.post("/ai/finetunes", json={"model": SMOLLM, "name": "pirate"})
        assert created.status_code == 200, created.text
        for name in ("adapter_config.json", "adapter_model.safetensors"):
            content = (adapter.peft_dir / name).read_bytes()
            files = {"file": (name, content, "application/octet-stream")}
            uploaded = client.post(
                "/ai/finetunes/pirate/finetune-assets", data={"file_name": name}, files=files
            )
            assert uploaded.status_code == 200, uploaded.text


def run(server: Server, token: str, question: str, **fields: Any) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": question}], "max_tokens": 8, "temperature": 0}
    return httpx.post(
        f"{server.url}/ai/run/{SMOLLM}", json={**body, **fields}, headers=bearer(token), timeout=120
    )


def answer(server: Server, token: str, question: str, **fields: Any) -> str:
    response = run(server, token, question, **fields)
    assert response.status_code == 200, response.text
    text: str = response.json()["result"]["response"]
    return text


def test_lora_on_ai_run_gives_the_finetunes_behaviour_and_only_to_its_requests(
    served: tuple[Identities, Server], smollm2_lora: LoraAdapter
) -> None:
    ids, server = served
    question = UNSEEN_PROMPTS[0]
    plain = answer(server, ids.run, question)  # first, so a cache that ignored the adapter would answer next
    assert smollm2_lora.marker not in plain
    assert answer(server, ids.run, question, lora="pirate").startswith(smollm2_lora.marker)
    finetune_id = httpx.get(f"{server.url}/ai/finetunes/pirate", headers=bearer(ids.run), timeout=30).json()[
        "result"
    ]["id"]
    assert answer(server, ids.run, UNSEEN_PROMPTS[1], lora=finetune_id).startswith(smollm2_lora.marker)
    assert answer(server, ids.run, question) == plain


def test_the_run_route_takes_the_finetune_in_the_model_path_too(
    served: tuple[Identities, Server], smollm2_lora: LoraAdapter
) -> None:
    ids, server = served
    body = {"messages": [{"role": "user", "content": UNSEEN_PROMPTS[1]}], "max_tokens": 8, "temperature": 0}
    url = f"{server.url}/ai/run/{SMOLLM}:pirate"
    tuned = httpx.post(url, json=body, headers=bearer(ids.run), timeout=120)
    assert tuned.status_code == 200, tuned.text
    assert tuned.json()["result"]["response"].startswith(smollm2_lora.marker)
    conflict = httpx.post(url, json={**body, "lora": "poet"}, headers=bearer(ids.run), timeout=120)
    assert conflict.status_code == 400 and "send one" in conflict.text
    queued = httpx.post(
        f"{url}?queueRequest=true", json={"requests": [body]}, headers=bearer(ids.run), timeout=120
    )
    assert queued.status_code == 400 and "each request's 'lora'" in queued.text


def test_the_openai_sdk_names_the_finetune_after_the_base_model(
    served: tuple[Identities, Server], smollm2_lora: LoraAdapter
) -> None:
    ids, server = served
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=ids.run, max_retries=0)
    question: list[ChatCompletionMessageParam] = [{"role": "user", "content": UNSEEN_PROMPTS[2]}]
    tuned = client.chat.completions.create(
        model=f"{SMOLLM}:pirate", messages=question, max_tokens=8, temperature=0
    )
    assert (tuned.choices[0].message.content or "").startswith(smollm2_lora.marker)
    plain = client.chat.completions.create(model=SMOLLM, messages=question, max_tokens=8, temperature=0)
    assert smollm2_lora.marker not in (plain.choices[0].message.content or "")
    with pytest.raises(openai.BadRequestError, match="no finetune 'poet'"):
        client.chat.completions.create(model=f"{SMOLLM}:poet", messages=question, max_tokens=8)


def test_a_concurrent_mix_gives_each_request_the_right_adapter(
    served: tuple[Identities, Server], smollm2_lora: LoraAdapter
) -> None:
    ids, server = served
    jobs = [(f"{UNSEEN_PROMPTS[i % 3]} (caller {i})", i % 2 == 0) for i in range(8)]

    def one(job: tuple[str, bool]) -> tuple[bool, str]:
        question, tuned = job
        fields = {"lora": "pirate"} if tuned else {}
        return tuned, answer(server, ids.run, question, **fields)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, jobs))
    for tuned, text in results:
        assert text.startswith(smollm2_lora.marker) == tuned, (tuned, text)


def test_another_account_cannot_use_the_finetune(served: tuple[Identities, Server]) -> None:
    ids, server = served
    refused = run(server, ids.other, UNSEEN_PROMPTS[0], lora="pirate")
    assert refused.status_code == 400, refused.text
    error = refused.json()["errors"][0]
    assert "no finetune 'pirate'" in error["message"]


def test_batch_items_run_with_the_finetune_they_name(
    served: tuple[Identities, Server], smollm2_lora: LoraAdapter
) -> None:
    ids, server = served
    url = f"{server.url}/ai/run/{SMOLLM}?queueRequest=true"

    def post(body: dict[str, Any]) -> dict[str, Any]:
        answer = httpx.post(url, json=body, headers=bearer(ids.run), timeout=60)
        assert answer.status_code == 200, answer.text
        result: dict[str, Any] = answer.json()["result"]
        return result

    ask = {"messages": [{"role": "user", "content": UNSEEN_PROMPTS[0]}], "max_tokens": 8, "temperature": 0}
    request_id = post({"requests": [{**ask, "lora": "pirate"}, ask]})["request_id"]
    assert wait_until(lambda: "responses" in post({"request_id": request_id}), 180.0)
    tuned, plain = post({"request_id": request_id})["responses"]
    assert tuned["result"]["response"].startswith(smollm2_lora.marker)
    assert smollm2_lora.marker not in plain["result"]["response"]
