"""A real PostgreSQL server for tests: its own data folder, a unix socket and one loopback port, no fsync.

PostgreSQL refuses to run as root, so under root the server runs as the `postgres` system user. A server
whose test process was killed before it could stop it is stopped by the next test run that starts one.

`dedicated_postgres()` gives a fault test a server of its own to break: stop it and start it again on the same
port and data, or freeze it (SIGSTOP to the postmaster and every backend, as a network partition looks to its
clients) and thaw it.
"""

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from tests.services.processes import free_port

POSTGRES_USER = "postgres"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
START_ATTEMPTS = 3
DIR_PREFIX = "cirrus-pg-"
OWNER_FILE = "owner.pid"


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL binaries, or no `postgres` user to run them as root."""


class PostgresStartError(RuntimeError):
    pass


def find_bin_dir() -> Path | None:
    """The newest installed major version's binaries (Debian layout), or those on PATH."""
    candidates = [p for p in Path("/usr/lib/postgresql").glob("*/bin") if (p / "initdb").exists()]
    if candidates:
        return max(candidates, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else -1)
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def unavailable_reason() -> str | None:
    """Why PostgreSQL cannot be started here, or None when it can."""
    if find_bin_dir() is None:
        return "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb); run `make test-setup`"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(POSTGRES_USER)
        except KeyError:
            return f"running as root and there is no `{POSTGRES_USER}` user to run PostgreSQL as"
    return None


@dataclass(frozen=True)
class _Runner:
    """Runs commands as the postgres user when we are root, as ourselves otherwise."""

    user: str | None

    @classmethod
    def for_current_user(cls) -> "_Runner":
        return cls(POSTGRES_USER if os.geteuid() == 0 else None)

    def own(self, path: Path) -> None:
        if self.user is not None:
            shutil.chown(path, self.user, self.user)

    def popen(self, argv: list[str], log: Path, cwd: Path) -> "subprocess.Popen[bytes]":
        with log.open("ab") as out:
            # Popen's user/group drop to the postgres user directly, so its pid is the server's own.
            return subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                user=self.user,
                group=self.user,
                extra_groups=[] if self.user else None,
                env={**os.environ, "LC_ALL": "C", "TZ": "UTC"},
            )


def _initdb(runner: _Runner, bin_dir: Path, root: Path) -> Path:
    data = root / "data"
    log = root / "initdb.log"
    argv = [str(bin_dir / "initdb"), "-D", str(data), "-U", POSTGRES_USER, "--auth=trust"]
    argv += ["--encoding=UTF8", "--locale=C", "--no-sync"]
    process = runner.popen(argv, log, cwd=root)
    if process.wait(timeout=120) != 0:
        raise PostgresStartError(f"initdb failed:\n{log.read_text(errors='replace')}")
    return data


def _server_argv(bin_dir: Path, data: Path, socket_dir: Path, port: int) -> list[str]:
    settings = {
        "listen_addresses": "127.0.0.1",
        "port": str(port),
        "unix_socket_directories": str(socket_dir),
        "fsync": "off",
        "synchronous_commit": "off",
        "full_page_writes": "off",
        "shared_buffers": "32MB",
        "max_connections": "200",
        "logging_collector": "off",
    }
    argv = [str(bin_dir / "postgres"), "-D", str(data)]
    for name, value in settings.items():
        argv += ["-c", f"{name}={value}"]
    return argv


def _accepts(dsn: str) -> bool:
    try:
        with psycopg.connect(dsn, connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False


def _wait_until_ready(process: "subprocess.Popen[bytes]", dsn: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise PostgresStartError(
                f"postgres exited with {process.returncode}:\n{log.read_text(errors='replace')}"
            )
        if _accepts(dsn):
            return
        time.sleep(0.05)
    raise PostgresStartError(
        f"postgres did not accept connections within {START_TIMEOUT_S:.0f}s:\n"
        f"{log.read_text(errors='replace')}"
    )


SMART_SHUTDOWN = (signal.SIGTERM, signal.SIGINT, signal.SIGKILL)
FAST_SHUTDOWN = (signal.SIGINT, signal.SIGKILL)


def _stop(process: "subprocess.Popen[bytes]", signals: tuple[signal.Signals, ...] = SMART_SHUTDOWN) -> None:
    """SIGTERM (smart shutdown); a server still waiting on clients gets SIGINT (fast), then SIGKILL."""
    for sig in signals:
        if process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=STOP_TIMEOUT_S / 2)


def _dsn(port: int) -> str:
    return f"postgresql://{POSTGRES_USER}@127.0.0.1:{port}/postgres"


def _start_on(runner: _Runner, bin_dir: Path, data: Path, root: Path, port: int) -> "subprocess.Popen[bytes]":
    log = root / "postgres.log"
    process = runner.popen(_server_argv(bin_dir, data, root, port), log, cwd=root)
    try:
        _wait_until_ready(process, _dsn(port), log)
    except PostgresStartError:
        _stop(process)
        raise
    return process


def _start(runner: _Runner, bin_dir: Path, data: Path, root: Path) -> tuple["subprocess.Popen[bytes]", int]:
    """Start the server on a free port; a port taken between probe and bind is tried again."""
    log = root / "postgres.log"
    for attempt in range(START_ATTEMPTS):
        port = free_port()
        try:
            return _start_on(runner, bin_dir, data, root, port), port
        except PostgresStartError:
            port_taken = "could not bind" in log.read_text(errors="replace")
            if not port_taken or attempt == START_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (a postmaster's backends and helpers)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue  # exited meanwhile
        if int(fields[1]) == pid:
            children.append(int(stat.parent.name))
    return children


def _signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


class PostgresServer:
    """A server of one test's own, which that test may stop, restart, freeze and thaw."""

    def __init__(self, runner: _Runner, bin_dir: Path, root: Path, data: Path) -> None:
        self._runner = runner
        self._bin_dir = bin_dir
        self._root = root
        self._data = data
        self._process, self.port = _start(runner, bin_dir, data, root)
        self._frozen: list[int] = []

    @property
    def dsn(self) -> str:
        return _dsn(self.port)

    @property
    def running(self) -> bool:
        return self._process.poll() is None

    def stop(self) -> None:
        """A fast shutdown (SIGINT): connected clients are disconnected, as in a crash or a failover."""
        self.resume()
        _stop(self._process, FAST_SHUTDOWN)

    def start(self) -> None:
        """Start again on the same port and data folder, so clients reconnect to the address they knew."""
        if not self.running:
            self._process = _start_on(self._runner, self._bin_dir, self._data, self._root, self.port)

    def freeze(self) -> None:
        """SIGSTOP the postmaster first (so it forks nothing more), then every process it started. Connections
        stay open and nothing answers, as with a network partition."""
        os.kill(self._process.pid, signal.SIGSTOP)
        self._frozen = [self._process.pid, *_children(self._process.pid)]
        _signal_all(self._frozen[1:], signal.SIGSTOP)

    def resume(self) -> None:
        _signal_all(self._frozen, signal.SIGCONT)
        self._frozen = []

    def close(self) -> None:
        self.resume()
        _stop(self._process)


def _alive(pid: int) -> bool:
    """Whether `pid` runs; a zombie (killed, not yet reaped by its parent) does not."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _postmaster_pid(data: Path) -> int | None:
    """The server's pid, if `data`'s server is still the process running under that pid."""
    try:
        pid = int((data / "postmaster.pid").read_text().split()[0])
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError, IndexError):
        return None
    return pid if str(data).encode() in command else None


def _reap_orphans() -> None:
    """Stop the servers of test runs that died without stopping them, and remove their folders."""
    for root in Path(tempfile.gettempdir()).glob(f"{DIR_PREFIX}*"):
        try:
            owner = int((root / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # not ours, or still being set up
        if _alive(owner):
            continue
        pid = _postmaster_pid(root / "data")
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGQUIT)  # immediate shutdown: nobody is left to use its data
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while _postmaster_pid(root / "data") is not None and time.monotonic() < deadline:
                time.sleep(0.05)
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def running_postgres() -> Iterator[str]:
    """Start a throwaway server; yield its DSN (`postgresql://postgres@127.0.0.1:PORT/postgres`)."""
    with dedicated_postgres() as server:
        yield server.dsn


@contextlib.contextmanager
def dedicated_postgres() -> Iterator[PostgresServer]:
    """Start a throwaway server a test may break; stopped (thawed first) and removed afterwards."""
    reason = unavailable_reason()
    if reason is not None:
        raise PostgresUnavailable(reason)
    bin_dir = find_bin_dir()
    assert bin_dir is not None
    runner = _Runner.for_current_user()
    _reap_orphans()
    # Not under pytest's tmp_path: its 0700 parents would keep the postgres user out.
    root = Path(tempfile.mkdtemp(prefix=DIR_PREFIX))
    try:
        (root / OWNER_FILE).write_text(str(os.getpid()))
        runner.own(root)
        data = _initdb(runner, bin_dir, root)
        server = PostgresServer(runner, bin_dir, root, data)
        try:
            yield server
        finally:
            server.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def with_database(dsn: str, name: str) -> str:
    """The same server's DSN, naming another database."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path=f"/{name}"))


def create_database(dsn: str, name: str | None = None) -> str:
    """Create an empty database on the server at `dsn`; return its DSN."""
    name = name or f"test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return with_database(dsn, name)


def drop_database(dsn: str) -> None:
    """Drop the database `dsn` names, closing any connection a test left open."""
    name = urlsplit(dsn).path.lstrip("/")
    with psycopg.connect(with_database(dsn, "postgres"), autocommit=True) as connection:
        statement = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        connection.execute(statement)
