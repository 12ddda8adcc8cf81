"""A real redis-server for tests and benchmarks: 127.0.0.1, a free port, no persistence, stopped by pid."""

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from tests.services.processes import free_port, stop

STARTUP_TIMEOUT_S = 10.0
PORT_ATTEMPTS = 3  # another process may take the free port between our probe and redis-server's bind


class RedisUnavailable(RuntimeError):
    pass


@contextmanager
def running_redis() -> Iterator[str]:
    """Yield `redis://127.0.0.1:PORT/0` for a fresh redis-server, terminated on exit."""
    executable = shutil.which("redis-server")
    if executable is None:
        raise RedisUnavailable("redis-server is not installed (Debian: apt-get install redis-server)")
    with tempfile.TemporaryDirectory(prefix="cirrus-redis-") as directory:
        process, port = _start(executable, Path(directory))
        try:
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            stop(process)


def _start(executable: str, directory: Path) -> tuple[subprocess.Popen[bytes], int]:
    for _ in range(PORT_ATTEMPTS):
        port = free_port()
        process = _launch(executable, directory, port)
        if _wait_for_ping(process, port):
            return process, port
        stop(process)
    log = (directory / "redis.log").read_text(errors="replace")[-2000:]
    raise RedisUnavailable(f"redis-server did not answer PING within {STARTUP_TIMEOUT_S}s:\n{log}")


def _launch(executable: str, directory: Path, port: int) -> subprocess.Popen[bytes]:
    arguments = ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    arguments += ["--dir", str(directory), "--daemonize", "no"]
    with (directory / "redis.log").open("ab") as log:
        return subprocess.Popen([executable, *arguments], stdout=log, stderr=subprocess.STDOUT)


def _wait_for_ping(process: subprocess.Popen[bytes], port: int) -> bool:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        if _pings(port):
            return True
        time.sleep(0.02)
    return False


def _pings(port: int) -> bool:
    client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.5, socket_timeout=0.5)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()
