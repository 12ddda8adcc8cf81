"""A real redis-server for tests and benchmarks: 127.0.0.1, a free port, no persistence, stopped by pid.

`dedicated_redis` hands a fault test a server of its own to stop, freeze (SIGSTOP: connections stay open and
nothing answers, as in a network partition) and bring back on the same port.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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
    with dedicated_redis() as server:
        yield server.url


@dataclass
class RedisServer:
    """A redis-server that a test may stop, freeze and bring back; `url` stays the same throughout."""

    executable: str
    directory: Path
    port: int
    process: "subprocess.Popen[bytes] | None"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        """Terminated (its data is gone: no persistence); clients then get their connections refused."""
        if self.process is not None:
            self.resume()
            stop(self.process)
            self.process = None

    def start(self) -> None:
        """Started again on the same port, empty, and answering PING before this returns."""
        if self.process is not None:
            return
        process = _launch(self.executable, self.directory, self.port)
        if not _wait_for_ping(process, self.port):
            stop(process)
            raise RedisUnavailable(
                f"redis-server did not come back on port {self.port}:\n{_log(self.directory)}"
            )
        self.process = process

    def freeze(self) -> None:
        """SIGSTOP: the kernel still accepts connections and data, and nothing ever answers."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT: it answers again, and works through what was sent meanwhile."""
        self._signal(signal.SIGCONT)

    def _signal(self, signum: signal.Signals) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signum)


@contextmanager
def dedicated_redis() -> Iterator[RedisServer]:
    """A fresh redis-server of the caller's own, resumed if frozen and terminated on exit."""
    executable = shutil.which("redis-server")
    if executable is None:
        raise RedisUnavailable("redis-server is not installed (Debian: apt-get install redis-server)")
    with tempfile.TemporaryDirectory(prefix="cirrus-redis-") as directory:
        process, port = _start(executable, Path(directory))
        server = RedisServer(executable, Path(directory), port, process)
        try:
            yield server
        finally:
            server.stop()


def _start(executable: str, directory: Path) -> tuple[subprocess.Popen[bytes], int]:
    for _ in range(PORT_ATTEMPTS):
        port = free_port()
        process = _launch(executable, directory, port)
        if _wait_for_ping(process, port):
            return process, port
        stop(process)
    raise RedisUnavailable(
        f"redis-server did not answer PING within {STARTUP_TIMEOUT_S}s:\n{_log(directory)}"
    )


def _log(directory: Path) -> str:
    return (directory / "redis.log").read_text(errors="replace")[-2000:]


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
