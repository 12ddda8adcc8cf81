"""Ray's side of talking to node agents: start or find the agent of a node, call it, read its streams, and turn
Ray's errors into the two a gateway acts on: the agent's own error (raised as is) or `NodeLost`."""

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

import ray
from ray.actor import ActorHandle
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from cirrus.cluster.agent import NodeAgent
from cirrus.cluster.remote import NodeLost
from cirrus.cluster.wire import Batch
from cirrus.errors import CirrusError, InternalError

log = logging.getLogger(__name__)
NAMESPACE = "cirrus"
RESOURCE = "cirrus"  # what a Ray node offers to say "run Cirrus here"
T = TypeVar("T")
AgentHandle = ActorHandle[Any]  # Ray's handles are typed loosely: calls on them are checked by the tests


def agent_name(node_id: str) -> str:
    return f"cirrus-agent-{node_id[:16]}"


_REMOTE_AGENT: Any = ray.remote(NodeAgent)


def agent_of(node_id: str, address: str) -> AgentHandle:
    """The node's agent, started there if it has none: detached (it outlives the gateway that started it; other
    gateways find it by name), pinned to its node, restarted by Ray if its process dies while the node lives.
    Blocking (it asks the GCS): call it in a thread."""
    handle: AgentHandle = _REMOTE_AGENT.options(
        name=agent_name(node_id),
        namespace=NAMESPACE,
        lifetime="detached",
        get_if_exists=True,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        max_restarts=-1,
        max_task_retries=0,
        num_cpus=0,
        max_concurrency=10_000,
    ).remote(node_id, address)
    return handle


def kill(agent: AgentHandle) -> None:
    """Remove the agent of a node that left, so Ray stops trying to restart it there. Blocking."""
    try:
        ray.kill(agent, no_restart=True)
    except Exception:  # already gone with its node
        log.debug("removing an agent failed", exc_info=True)


def live_cirrus_nodes() -> dict[str, str]:
    """Node id -> address of each live Ray node that offers the `cirrus` resource."""
    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return {
        node["NodeID"]: node["NodeManagerAddress"]
        for node in nodes
        if node.get("Alive") and node.get("Resources", {}).get(RESOURCE, 0) > 0
    }


async def call(awaitable: Awaitable[T], timeout_s: float | None = None) -> T:
    """An agent call's result; the agent's CirrusError raised as is, any other error of its own as InternalError;
    anything Ray says about the node or actor (or no answer within `timeout_s`) as NodeLost."""
    try:
        async with asyncio.timeout(timeout_s):
            return await awaitable
    except ray.exceptions.RayError as error:
        raise translated(error) from error
    except TimeoutError as error:
        raise NodeLost(f"no answer within {timeout_s} s") from error


def translated(error: "ray.exceptions.RayError") -> Exception:
    if isinstance(error, ray.exceptions.RayTaskError):
        cause = error.cause
        if isinstance(cause, CirrusError):
            return cause
        if isinstance(cause, ray.exceptions.RayError):  # the call was cut (cancelled, its worker died)
            return NodeLost(type(cause).__name__)
        # A bug in the agent: the same request would fail the same way on every node, so it is not retried.
        return InternalError(f"the node agent failed: {type(cause).__name__}")
    return NodeLost(type(error).__name__)


async def unless_lost(work: Awaitable[T], lost: asyncio.Event) -> T:
    """`work`'s result; NodeLost as soon as the node is known lost (the work is then cancelled)."""
    task = asyncio.ensure_future(work)
    task.add_done_callback(_retrieved)  # work abandoned below may still fail: that is expected, not news
    gone = asyncio.ensure_future(lost.wait())
    try:
        done, _ = await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not task.done():
            task.cancel()
    if task in done:
        return task.result()
    raise NodeLost("the node left the cluster")


def _retrieved(task: "asyncio.Future[Any]") -> None:
    if not task.cancelled():
        task.exception()


class StreamReader:
    """Reads a node's stream of batches in a task of its own, so the answer waits on a plain queue: one task and
    one watcher of the node's `lost` event per stream, not a few futures per batch (each batch's cost on the
    gateway is CPU the node's engine does not get when both share a machine). Close it when done."""

    def __init__(self, stream: Any, lost: asyncio.Event) -> None:
        self._stream = stream
        self._queue: asyncio.Queue[Batch | Exception | None] = asyncio.Queue()
        self._reading = asyncio.ensure_future(self._read())
        self._watching = asyncio.ensure_future(self._watch(lost))

    async def next(self, timeout_s: float) -> Batch | None:
        """The next batch, None at the stream's end; NodeLost as soon as the node is known lost, or when nothing
        came within `timeout_s` (the node enforces the request's deadline itself: past it, the node is stuck)."""
        try:
            async with asyncio.timeout(timeout_s):
                item = await self._queue.get()
        except TimeoutError as error:
            raise NodeLost(f"no batch within {timeout_s:.1f} s") from error
        if isinstance(item, Exception):
            raise item
        return item

    def close(self) -> None:
        self._reading.cancel()
        self._watching.cancel()

    async def _read(self) -> None:
        try:
            while True:
                batch: Batch = await (await self._stream.__anext__())
                self._queue.put_nowait(batch)
        except StopAsyncIteration:
            self._queue.put_nowait(None)
        except ray.exceptions.RayError as error:
            self._queue.put_nowait(translated(error))
        except Exception as error:  # e.g. a batch that cannot be unpickled: the answer ends with an error
            log.exception("reading a node's stream failed")
            self._queue.put_nowait(InternalError(f"reading the node's stream failed: {type(error).__name__}"))
        finally:
            self._watching.cancel()

    async def _watch(self, lost: asyncio.Event) -> None:
        await lost.wait()
        self._reading.cancel()
        self._queue.put_nowait(NodeLost("the node left the cluster"))
