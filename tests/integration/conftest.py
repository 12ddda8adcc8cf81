"""Integration tests run the real server and engine; one shared default server serves most of them."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.server import Server, running_server

SMOLLM = "@cf/huggingface/smollm2-135m-instruct"
GEMMA = "@cf/google/gemma-3-270m"


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(tmp_path_factory.mktemp("server")) as running:
        yield running


@pytest.fixture
def server_dir(tmp_path: Path) -> Path:
    return tmp_path
