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
    except ray.exceptions.RayTaskError as error:
        cause = error.cause
        if isinstance(cause, CirrusError):
            raise cause from None
        if isinstance(cause, ray.exceptions.RayError):  # the call was cut (cancelled, its worker died)
            raise NodeLost(type(cause).__name__) from error
        # A bug in the agent: the same request would fail the same way on every node, so it is not retried.
        raise InternalError(f"the node agent failed: {type(cause).__name__}") from error
    except ray.exceptions.RayError as error:
        raise NodeLost(type(error).__name__) from error
    except TimeoutError as error:
        raise NodeLost(f"no answer within {timeout_s} s") from error


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


async def next_batch(stream: Any, lost: asyncio.Event, timeout_s: float) -> Batch | None:
    """The stream's next batch, None at its end; NodeLost as soon as the node is known lost, or when nothing
    came within `timeout_s` (the node enforces the request's deadline itself: past it, the node is stuck)."""
    return await unless_lost(_read_one(stream, timeout_s), lost)


async def _read_one(stream: Any, timeout_s: float) -> Batch | None:
    try:
        async with asyncio.timeout(timeout_s):
            ref = await call(stream.__anext__())
            batch: Batch = await call(ref)
    except StopAsyncIteration:
        return None
    except TimeoutError as error:
        raise NodeLost(f"no batch within {timeout_s:.1f} s") from error
    return batch
