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


def agent_of(node_id: str, address: str) -> AgentHandle:
    """The node's agent, started there if it has none: detached (it outlives the gateway that started it; other
    gateways find it by name), pinned to its node, restarted by Ray if its process dies while the node lives."""
    remote_agent: Any = ray.remote(NodeAgent)
    handle: AgentHandle = remote_agent.options(
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


async def next_batch(stream: Any, lost: asyncio.Event) -> Batch | None:
    """The stream's next batch, None at its end; NodeLost as soon as the node is known lost."""
    read = asyncio.ensure_future(_read_one(stream))
    read.add_done_callback(_retrieved)  # a read abandoned below may still fail: that is expected, not news
    gone = asyncio.ensure_future(lost.wait())
    try:
        done, _ = await asyncio.wait({read, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not read.done():
            read.cancel()
    if read in done:
        return read.result()
    raise NodeLost("the node left the cluster")


def _retrieved(task: "asyncio.Future[Batch | None]") -> None:
    if not task.cancelled():
        task.exception()


async def _read_one(stream: Any) -> Batch | None:
    try:
        ref = await call(stream.__anext__())
    except StopAsyncIteration:
        return None
    batch: Batch = await call(ref)
    return batch


def cancel(stream: Any) -> None:
    try:
        ray.cancel(stream)
    except Exception:  # already finished or its node is gone: nothing left to stop
        log.debug("cancelling a stream failed", exc_info=True)
