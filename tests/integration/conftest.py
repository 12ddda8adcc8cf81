"""Integration tests run the real server and engine; one shared default server serves most of them."""

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.gateway import Identities, provision, write_gateway_catalog
from tests.integration.lora import LoraAdapter, cached_adapter
from tests.integration.minilm import convert_minilm
from tests.integration.server import Server, running_server
from tests.services.postgres import create_database

SMOLLM = "@cf/huggingface/smollm2-135m-instruct"
GEMMA = "@cf/google/gemma-3-270m"


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(tmp_path_factory.mktemp("server")) as running:
        yield running


@pytest.fixture(scope="session")
def minilm_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """all-MiniLM-L6-v2 as an F16 GGUF, converted once per session."""
    return convert_minilm(tmp_path_factory.mktemp("minilm") / "minilm-f16.gguf")


@pytest.fixture(scope="session")
def smollm2_lora() -> LoraAdapter:
    """A PEFT LoRA for SmolLM2 whose answers begin "Ahoy, matey!", and its GGUF: trained once per recipe (cached)."""
    return cached_adapter("pirate")


@pytest.fixture
def server_dir(tmp_path: Path) -> Path:
    return tmp_path


@dataclass(frozen=True)
class Gateway:
    server: Server
    ids: Identities
    database_url: str


def _gateway(directory: Path, database_url: str, **env: str) -> Iterator[Gateway]:
    ids = provision(database_url)
    catalog = write_gateway_catalog(directory)
    # No authentication cache, so a revoked token or a new limit takes effect at once in these tests.
    with running_server(
        directory, "--catalog", str(catalog), database=database_url, auth_cache_ttl_s="0", **env
    ) as running:
        yield Gateway(running, ids, database_url)


@pytest.fixture(scope="session")
def gateway_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    directory = tmp_path_factory.mktemp("gateway-sqlite")
    yield from _gateway(directory, str(directory / "cirrus.db"))


@pytest.fixture(scope="session")
def gateway_postgresql(tmp_path_factory: pytest.TempPathFactory, postgres_dsn: str) -> Iterator[Gateway]:
    yield from _gateway(tmp_path_factory.mktemp("gateway-postgresql"), create_database(postgres_dsn))


@pytest.fixture(params=["sqlite", "postgresql"])
def gateway(request: pytest.FixtureRequest) -> Gateway:
    """The gateway on each database engine in turn."""
    running: Gateway = request.getfixturevalue(f"gateway_{request.param}")
    return running
