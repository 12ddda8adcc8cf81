"""Start a real `cirrus serve` on 127.0.0.1 for a test, with its own settings, and stop it afterwards."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

STARTUP_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def client(self, timeout_s: float = 120.0) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=timeout_s)

    def instances(self) -> list[dict[str, object]]:
        body = httpx.get(f"{self.url}/admin/instances", timeout=10).json()
        instances: list[dict[str, object]] = body["result"]["instances"]
        return instances

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _wait_ready(server: Server) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"cirrus serve exited early:\n{server.log()}")
        try:
            if httpx.get(f"{server.url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"cirrus serve did not become healthy:\n{server.log()}")


@contextmanager
def running_server(tmp_path: Path, *args: str, **env: str) -> Iterator[Server]:
    port = free_port()
    log_path = tmp_path / f"server-{port}.log"
    environment = {
        **os.environ,
        "CIRRUS_THREADS": "2",
        "CIRRUS_STATE_DIR": str(tmp_path / "state"),
        **{f"CIRRUS_{k.upper()}": v for k, v in env.items()},
    }
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "cirrus.cli", "serve", "--host", "127.0.0.1", "--port", str(port), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment,
        )
    server = Server(f"http://127.0.0.1:{port}", process, log_path)
    try:
        _wait_ready(server)
        yield server
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def write_catalog(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def wait_until(condition: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    """Poll a condition, bounded in time; True as soon as it holds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def children_of(pid: int) -> list[int]:
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            if int(stat.read_text().rsplit(")", 1)[-1].split()[1]) == pid:
                children.append(int(stat.parent.name))
    return children


def kill_now(server: Server) -> None:
    """SIGKILL the gateway; its workers notice their socket close and exit, or are killed here."""
    workers = children_of(server.process.pid)
    server.process.send_signal(signal.SIGKILL)
    server.process.wait(timeout=10)
    gone = wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in workers), 10.0)
    if not gone:
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
