"""A real multi-node Ray cluster on one machine, for tests: each node a separate `ray start --block` process.

Each node has its own resources, its own environment (a Cirrus state and cache directory of its own) and its
own ports, all outside 10002-19999, where the tests' servers listen. `running_ray_cluster()` starts a head and
two Cirrus nodes; a test may add nodes, stop one (SIGTERM) or kill its raylet (SIGKILL), and everything the
cluster started is gone when it stops, even after a failed test (an atexit fallback) or a killed test run
(the next cluster stops the processes of clusters whose owner died).

Measured on these machines (2 cores shared with other work, Ray 2.60):
- The head is up in 3.2-4.8 s; each further node is alive at the GCS 1.9-3.5 s after its `ray start`.
- A driver on this machine connects with a plain `ray.init(address=cluster.address)` in about 0.45 s, though
  every raylet shares one address: Ray rewrites `--node-ip-address=127.0.0.1` to the machine's own address
  (192.0.2.2 here), the driver resolves the same address, and of several raylets on its host Ray picks the
  head's. No `_node_ip_address` is needed. An actor placed with NodeAffinitySchedulingStrategy answers within
  about 0.7 s and sees the environment its node's `ray start` was given.
- `RayNode.stop()` returns in about 0.4 s and the head counts the node dead at once: the raylet unregisters.
- `RayNode.kill()` returns in about 0.7 s (`ray start` notices its raylet died within a second and ends the
  rest); the head counts the node dead about 1.5 s after the SIGKILL. With Ray's default health checks
  (every 3 s, dead after 5 misses) that took 17 s.
- Stopping the whole cluster takes about 1.9 s; tests/cluster/test_ray_cluster_service.py, 16-20 s.

What Ray does here, and the RAY_ settings that matter (set for every node in `RAY_ENV`):
- RAY_USAGE_STATS_ENABLED=0: no usage report (and no attempt to reach the network).
- RAY_AUTH_MODE=disabled: any local `ray.init()` leaves a token in ~/.ray/auth_token, and with the mode unset a
  later `ray start` turns token authentication on, which the GCS client here does not send.
- RAY_health_check_period_ms / _timeout_ms / _failure_threshold / _initial_delay_ms: how soon the GCS counts a
  node whose raylet died as dead (read by the head's GCS).
- RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=0: on SIGTERM a node otherwise drains for up to 30 s while an actor
  lives on it; 0 makes `stop()` immediate. A node's `env` may set it back to test draining.
- AUTOSCALER_METRIC_PORT (head only): the autoscaler monitor's metrics port, 44217 by default for every head.
- Ray's gRPC servers listen on every interface whatever the node address; Ray offers no setting for that.
- `--ray-client-server-port` needs `ray[client]`, which is not installed, so no client server starts.
- Nodes start one at a time: two `ray start`s racing in one temp dir can pick the same socket names.
- Every Ray process of a node (gcs_server, raylet, agents, workers) stays in the session of its `ray start`,
  which starts in a new session; workers move to process groups of their own, so a node is swept by session.
  No PR_SET_PDEATHSIG ties a node to the test process: that needs a preexec_fn, unsafe once a driver's threads
  run; a cluster whose test process was killed is swept by the next `RayCluster()`.
"""

import atexit
import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ray._raylet import GcsClient  # type: ignore[attr-defined]  # missing from Ray's stub
from ray.core.generated.gcs_pb2 import GcsNodeInfo  # type: ignore[attr-defined]  # generated at run time

from tests.services.processes import free_port

RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_health_check_initial_delay_ms": "0",
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "500",
    "RAY_health_check_failure_threshold": "3",
    "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
}
# A loopback address Ray keeps as given: it rewrites 127.0.0.1 (and localhost) to the machine's own address,
# and test traffic stays on loopback. A driver on this machine passes it to ray.init as `_node_ip_address`.
NODE_IP = "127.0.0.2"
NODE_LABEL = "cirrus-test-node"
NODE_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,30}")
NUM_CPUS = 1
OBJECT_STORE_BYTES = 100 * 1024 * 1024
WORKER_PORTS_PER_NODE = 50
LOW_PORT_FLOOR = 20000  # the tests' servers use 10002-19999
PREFERRED_GCS_PORT = 6390
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
GCS_RPC_TIMEOUT_S = 5.0
POLL_S = 0.1
DIR_PREFIX = "crc-"
OWNER_FILE = "owner.pid"
SESSIONS_FILE = "sessions"


class RayClusterError(RuntimeError):
    pass


class _NodeInfo(Protocol):
    """What this module reads of the GCS's GcsNodeInfo."""

    node_id: bytes
    state: int
    labels: Mapping[str, str]


class _NodeTable(Protocol):
    """What this module asks of Ray's GCS client."""

    def get_all_node_info(self, timeout: float) -> Mapping[object, _NodeInfo]: ...


@dataclass
class RayNode:
    """One `ray start --block` process and everything it started."""

    name: str
    resources: dict[str, float]
    env: dict[str, str]
    process: "subprocess.Popen[bytes]"
    log: Path
    _find_id: Callable[[str], str | None] = field(repr=False)
    _id: str | None = field(default=None, repr=False)

    def node_id(self) -> str | None:
        """Its Ray node id (hex) once the GCS knows it; it stays the same after the node dies."""
        if self._id is None:
            self._id = self._find_id(self.name)
        return self._id

    def stop(self) -> None:
        """SIGTERM to its `ray start --block`: this node alone shuts down, and nothing of it is left."""
        if self.process.poll() is None:
            self.process.terminate()
            _wait_or_kill(self.process)
        _sweep_session(self.process.pid)

    def kill(self) -> None:
        """SIGKILL its raylet, as a node dies uncleanly; `ray start` then ends the rest, and what remains
        of its session is killed here, so no worker outlives it."""
        raylet = _raylet_pid(self.process.pid)
        if raylet is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(raylet, signal.SIGKILL)
        _wait_or_kill(self.process)
        _sweep_session(self.process.pid)

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""


class RayCluster:
    """Nodes started one at a time on this machine under one short temp dir; `stop()` ends them all."""

    def __init__(self, root: Path | None = None) -> None:
        """`root` (a new dir under /tmp when None) holds Ray's temp dir, the nodes' logs and directories."""
        _reap_orphans()
        # Directly under /tmp: Ray's socket paths below the root must stay within the 107-byte limit.
        root = root or Path(tempfile.mkdtemp(prefix=DIR_PREFIX, dir="/tmp"))
        self.root = root
        self.address = ""
        self.nodes: dict[str, RayNode] = {}
        self._gcs: _NodeTable | None = None
        self._taken_ports: set[int] = set()
        (root / OWNER_FILE).write_text(str(os.getpid()))
        atexit.register(self.stop)

    def start_head(
        self, resources: Mapping[str, float] | None = None, env: Mapping[str, str] | None = None
    ) -> RayNode:
        """The head (GCS and a raylet), named "head"; returns once the GCS counts it alive."""
        if self.address:
            raise RayClusterError("the head is already started")
        gcs_port = self._gcs_port()
        self.address = f"{NODE_IP}:{gcs_port}"
        extra = ["--head", f"--port={gcs_port}", "--include-dashboard=false"]
        node_env = {"AUTOSCALER_METRIC_PORT": str(self._port()), **(env or {})}
        node = self._launch("head", dict(resources or {}), node_env, extra)
        self._gcs = _connect(self.address, node)
        self._wait_alive(node)
        return node

    def add_node(self, name: str, resources: Mapping[str, float], env: Mapping[str, str]) -> RayNode:
        """A further node; returns once the head counts it alive. Call it from one thread at a time."""
        if not self.address:
            raise RayClusterError("start the head first")
        node = self._launch(name, dict(resources), dict(env), [f"--address={self.address}"])
        self._wait_alive(node)
        return node

    def add_cirrus_node(self, name: str) -> RayNode:
        """A node offering itself to Cirrus (`cirrus` and `node:NAME`), with a state and cache dir of its own."""
        return self.add_node(name, cirrus_resources(name), self.node_dirs(name))

    def node_dirs(self, name: str) -> dict[str, str]:
        """CIRRUS_STATE_DIR and CIRRUS_CACHE_DIR for node `name`, created under the cluster's temp dir."""
        dirs = {
            "CIRRUS_STATE_DIR": self.root / name / "state",
            "CIRRUS_CACHE_DIR": self.root / name / "cache",
        }
        for path in dirs.values():
            path.mkdir(parents=True, exist_ok=True)
        return {key: str(path) for key, path in dirs.items()}

    def alive_node_ids(self) -> set[str]:
        return {_hex(info) for info in self._node_infos() if info.state == GcsNodeInfo.ALIVE}

    def wait_dead(self, node: RayNode, timeout_s: float) -> None:
        """Until the head counts `node` dead; RayClusterError after `timeout_s`."""
        node_id = node.node_id()
        deadline = time.monotonic() + timeout_s
        while node_id in self.alive_node_ids():
            if time.monotonic() > deadline:
                raise RayClusterError(f"the head still counts node {node.name} alive after {timeout_s}s")
            time.sleep(POLL_S)

    def stop(self) -> None:
        """Every node (the head last), every process they started, and the temp dir."""
        atexit.unregister(self.stop)
        self._gcs = None
        for node in reversed(list(self.nodes.values())):
            node.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def sessions(self) -> list[int]:
        """The session id of each node's processes (the pid of its `ray start`)."""
        return [node.process.pid for node in self.nodes.values()]

    def _launch(
        self, name: str, resources: dict[str, float], env: dict[str, str], extra: list[str]
    ) -> RayNode:
        if not NODE_NAME.fullmatch(name) or name in self.nodes:
            raise RayClusterError(f"node name {name!r} is taken or not a lowercase label value")
        log = self.root / f"{name}.log"
        argv = [*_ray_start(self.root, name, resources), *self._port_args(), *extra]
        # A RAY_ADDRESS of the test's environment names some other cluster: a node joins only --address.
        inherited = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
        node_env = {**inherited, **RAY_ENV, **env}
        with log.open("ab") as out:
            process = subprocess.Popen(
                argv, env=node_env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        with (self.root / SESSIONS_FILE).open("a") as sessions:
            sessions.write(f"{process.pid}\n")
        node = RayNode(name, resources, env, process, log, self._find_id)
        self.nodes[name] = node
        return node

    def _port_args(self) -> list[str]:
        single = [
            "node-manager-port", "object-manager-port", "dashboard-agent-listen-port",
            "dashboard-agent-grpc-port", "metrics-export-port", "runtime-env-agent-port",
        ]  # fmt: skip
        workers = self._worker_ports()
        args = [f"--{option}={self._port()}" for option in single]
        return [*args, f"--min-worker-port={workers.start}", f"--max-worker-port={workers.stop - 1}"]

    def _port(self) -> int:
        port = free_port()  # from the kernel's ephemeral range, above 32767 on these machines
        self._taken_ports.add(port)
        return port

    def _gcs_port(self) -> int:
        if _bindable(PREFERRED_GCS_PORT):
            self._taken_ports.add(PREFERRED_GCS_PORT)
            return PREFERRED_GCS_PORT
        return self._port()

    def _worker_ports(self) -> range:
        """A free block between 20000 and the ephemeral range, where no outgoing connection takes a port."""
        ephemeral_low = _ephemeral_low()
        for _ in range(200):
            start = random.randrange(LOW_PORT_FLOOR, ephemeral_low - WORKER_PORTS_PER_NODE)
            block = range(start, start + WORKER_PORTS_PER_NODE)
            if self._taken_ports.isdisjoint(block) and all(_bindable(port) for port in block):
                self._taken_ports.update(block)
                return block
        raise RayClusterError("no free block of worker ports between 20000 and the ephemeral range")

    def _wait_alive(self, node: RayNode) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if node.process.poll() is not None:
                raise RayClusterError(f"`ray start` of node {node.name} exited:\n{node.log_tail()}")
            node_id = node.node_id()
            if node_id is not None and node_id in self.alive_node_ids():
                return
            time.sleep(POLL_S)
        raise RayClusterError(f"node {node.name} not alive after {START_TIMEOUT_S}s:\n{node.log_tail()}")

    def _find_id(self, name: str) -> str | None:
        return next((_hex(info) for info in self._node_infos() if info.labels.get(NODE_LABEL) == name), None)

    def _node_infos(self) -> list[_NodeInfo]:
        if self._gcs is None:
            raise RayClusterError("the cluster has no running head")
        return list(self._gcs.get_all_node_info(timeout=GCS_RPC_TIMEOUT_S).values())


def cirrus_resources(name: str) -> dict[str, float]:
    return {"cirrus": 1.0, f"node:{name}": 1.0}


@contextmanager
def running_ray_cluster(worker_names: Sequence[str] = ("a", "b")) -> Iterator[RayCluster]:
    """A head (no `cirrus` resource) and one Cirrus node per name, each with its own resources and
    directories; everything stopped and removed on exit."""
    cluster = RayCluster()
    try:
        cluster.start_head(env=cluster.node_dirs("head"))
        for name in worker_names:
            cluster.add_cirrus_node(name)
        yield cluster
    finally:
        cluster.stop()


def _ray_start(root: Path, name: str, resources: dict[str, float]) -> list[str]:
    ray = Path(sys.executable).with_name("ray")  # the `ray` of this interpreter's environment
    return [
        str(ray), "start", "--block", f"--node-ip-address={NODE_IP}", f"--temp-dir={root}",
        f"--num-cpus={NUM_CPUS}", f"--resources={json.dumps(resources)}", f"--labels={NODE_LABEL}={name}",
        f"--object-store-memory={OBJECT_STORE_BYTES}", "--disable-usage-stats",
    ]  # fmt: skip


def _connect(address: str, head: RayNode) -> _NodeTable:
    """A GCS client, once the GCS accepts connections (the client itself would block for 30 s)."""
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if head.process.poll() is not None:
            raise RayClusterError(f"the head's `ray start` exited:\n{head.log_tail()}")
        with contextlib.suppress(OSError), socket.create_connection((host, int(port)), timeout=0.5):
            client: _NodeTable = GcsClient(address=address)
            return client
        time.sleep(POLL_S)
    raise RayClusterError(
        f"the GCS did not listen on {address} within {START_TIMEOUT_S}s:\n{head.log_tail()}"
    )


def _hex(info: _NodeInfo) -> str:
    return info.node_id.hex()


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ephemeral_low() -> int:
    text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
    return int(text.split()[0])


def _wait_or_kill(process: "subprocess.Popen[bytes]") -> None:
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def session_processes(session: int) -> list[int]:
    """The live (not zombie) processes in session `session`."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue  # exited meanwhile
        if fields[0] != "Z" and int(fields[3]) == session:
            members.append(int(stat.parent.name))
    return members


def _sweep_session(session: int) -> None:
    """SIGKILL what is left of a node's session, until nothing is."""
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while (left := session_processes(session)) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def _raylet_pid(session: int) -> int | None:
    for pid in session_processes(session):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/exe").resolve().name == "raylet":
                return pid
    return None


def _running(pid: int) -> bool:
    """Whether `pid` runs; a zombie (exited, not yet reaped) does not."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _reap_orphans() -> None:
    """Stop the nodes of clusters whose test process died before it could, and remove their temp dirs."""
    for root in Path("/tmp").glob(f"{DIR_PREFIX}*"):
        try:
            owner = int((root / OWNER_FILE).read_text())
            sessions = [int(line) for line in (root / SESSIONS_FILE).read_text().split()]
        except (OSError, ValueError):
            continue  # not ours, or still being set up
        if _running(owner):
            continue
        for session in sessions:
            if _started_in(session, root):
                _sweep_session(session)
        shutil.rmtree(root, ignore_errors=True)


def _started_in(session: int, root: Path) -> bool:
    """Whether `session`'s leader is still a `ray start` of `root` (and not a reused pid)."""
    try:
        command = Path(f"/proc/{session}/cmdline").read_bytes()
    except OSError:
        return False
    return f"--temp-dir={root}".encode() in command
