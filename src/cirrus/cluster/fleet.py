"""The gateway's picture of the cluster: which nodes offer Cirrus, each node's agent, and each node's latest
report, fed to the placer.

Two loops keep it fresh. Discovery (every `discover_interval_s`) asks Ray which live nodes offer the `cirrus`
resource: a new one gets an agent (started, or found by name when another gateway started it), one Ray counts
dead is dropped. Polling (every `poll_interval_s`) asks each agent for its report; an agent that fails to answer
`LOST_AFTER` polls in a row is taken out of placement and its streams are ended (`Node.lost`), since Ray may take
longer to count a node whose machine stopped answering as dead. A node that Ray counts dead is dropped within a
discovery round (about 1 s); one that hangs, within about 4 s (two polls of up to 1.5 s each, 0.5 s apart):
under the 5 s the platform promises.
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import ray

from cirrus.cluster import ray_calls
from cirrus.cluster.report import NodeReport
from cirrus.placement.placer import Placer

log = logging.getLogger(__name__)
LOST_AFTER = 2
READY_TIMEOUT_S = 120.0  # an agent's first answer: its process starts and its platform opens


@dataclass
class Node:
    node_id: str
    address: str
    agent: ray_calls.AgentHandle
    report: NodeReport | None = None
    failures: int = 0
    lost: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def placeable(self) -> bool:
        return self.report is not None and not self.lost.is_set()


class Fleet:
    def __init__(
        self,
        address: str,
        placer: Placer,
        node_ip: str | None = None,
        poll_interval_s: float = 0.5,
        discover_interval_s: float = 1.0,
    ) -> None:
        self.address = address
        self.node_ip = node_ip
        self.placer = placer
        self._poll_interval_s = poll_interval_s
        self._discover_interval_s = discover_interval_s
        self._nodes: dict[str, Node] = {}
        self._joining: dict[str, asyncio.Task[None]] = {}
        self._loops: list[asyncio.Task[None]] = []
        self._chores: set[asyncio.Task[None]] = set()
        self._first_join = asyncio.Event()

    # -- what the gateway reads -----------------------------------------------------------------------------

    def node(self, node_id: str) -> Node:
        return self._nodes[node_id]

    def nodes(self) -> list[Node]:
        return list(self._nodes.values())

    def placeable(self, node_id: str) -> Node | None:
        node = self._nodes.get(node_id)
        return node if node is not None and node.placeable else None

    def reports(self) -> list[NodeReport]:
        return [node.report for node in self._nodes.values() if node.report is not None]

    # -- lifecycle -------------------------------------------------------------------------------------------

    async def start(self, first_node_timeout_s: float = READY_TIMEOUT_S) -> None:
        """Connect to the cluster and wait until at least one node's agent answered (or the timeout)."""
        await asyncio.to_thread(_connect, self.address, self.node_ip)
        await self._discover()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(first_node_timeout_s):
                await self._first_join.wait()
        self._loops = [
            asyncio.create_task(self._every(self._discover_interval_s, self._discover)),
            asyncio.create_task(self._every(self._poll_interval_s, self._poll)),
        ]

    async def close(self) -> None:
        for task in [*self._loops, *self._joining.values()]:
            task.cancel()
        for task in [*self._loops, *self._joining.values()]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await asyncio.to_thread(ray.shutdown)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)

    async def _every(self, interval_s: float, step: Callable[[], Any]) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await step()
            except Exception:  # one failed round must not stop the loop
                log.exception("a cluster upkeep round failed")

    # -- discovery ---------------------------------------------------------------------------------------------

    async def _discover(self) -> None:
        live = await asyncio.to_thread(ray_calls.live_cirrus_nodes)
        for node_id in [n for n in self._nodes if n not in live]:
            self._drop(node_id, "Ray counts it dead or it no longer offers cirrus")
        for node_id, address in live.items():
            if node_id not in self._nodes and node_id not in self._joining:
                self._joining[node_id] = asyncio.create_task(self._join(node_id, address))

    async def _join(self, node_id: str, address: str) -> None:
        try:
            agent = await asyncio.to_thread(ray_calls.agent_of, node_id, address)
            info: dict[str, Any] = await ray_calls.call(agent.ready.remote(), READY_TIMEOUT_S)
            report: NodeReport = await ray_calls.call(agent.status.remote(), READY_TIMEOUT_S)
        except Exception as error:
            log.warning("node %s did not start its agent: %s", node_id[:12], error)
            return
        finally:
            self._joining.pop(node_id, None)
        self._nodes[node_id] = Node(node_id, address, agent, report)
        self.placer.update(report.view)
        self._first_join.set()
        log.info("node %s joined (%s, agent pid %s)", node_id[:12], address, info.get("pid"))

    def _drop(self, node_id: str, why: str) -> None:
        node = self._nodes.pop(node_id, None)
        if node is not None:
            node.lost.set()
            self.placer.remove(node_id)
            log.warning("node %s left: %s", node_id[:12], why)
            self._spawn(asyncio.to_thread(ray_calls.kill, node.agent))

    # -- polling -------------------------------------------------------------------------------------------

    async def _poll(self) -> None:
        nodes = list(self._nodes.values())
        await asyncio.gather(*(self._poll_one(node) for node in nodes))

    async def _poll_one(self, node: Node) -> None:
        try:
            report: NodeReport = await ray_calls.call(node.agent.status.remote(), 1.5)
        except Exception as error:  # lost, or an agent that cannot report: either way not placeable
            node.failures += 1
            if node.failures >= LOST_AFTER and not node.lost.is_set():
                node.lost.set()
                self.placer.remove(node.node_id)
                log.warning("node %s stopped answering: %s", node.node_id[:12], error)
            return
        if self._nodes.get(node.node_id) is not node:
            return  # dropped while it answered: a late answer must not bring it back
        if node.lost.is_set():  # it answers again: a fresh start, its old streams are gone already
            node.lost = asyncio.Event()
            log.info("node %s answers again", node.node_id[:12])
        node.failures = 0
        node.report = report
        self.placer.update(report.view)


def _connect(address: str, node_ip: str | None) -> None:
    if not ray.is_initialized():
        ray.init(
            address=address,
            _node_ip_address=node_ip,
            namespace=ray_calls.NAMESPACE,
            log_to_driver=False,
            logging_level=logging.WARNING,
            configure_logging=False,
        )
