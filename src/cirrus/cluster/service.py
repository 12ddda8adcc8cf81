"""The gateway's backend on a cluster: each request is placed on a node (`cirrus.placement`) and run by that
node's agent; the same interface as the single node's `InferenceService` (`service.Backend`).

Failover: a node that is lost before the request's first byte (Ray says its actor or node died, or the fleet
counts it lost) costs nothing but time: the request is placed again, on another node, within its deadline, and
the lost node is told to drop it in case it was only slow. Once the answer began, a lost node ends it with the
protocol's error frame (`RemoteGeneration`).

Every placement is paired with exactly one `placer.finished`: on failure here, else when the answer closes.
"""

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from cirrus.catalog import Catalog, ModelSpec
from cirrus.cluster import ray_calls
from cirrus.cluster.fleet import Fleet, Node
from cirrus.cluster.remote import NodeLost, RemoteGeneration, first_events, see_failure
from cirrus.cluster.wire import Batch, Failed
from cirrus.errors import CirrusError, ModelNotInstalled, ModelTooLarge, NoNodeAvailable, RequestTimeout
from cirrus.placement.placer import NoNodeFits
from cirrus.placement.view import Placement, PlacementRequest
from cirrus.runtime.params import Usage
from cirrus.runtime.progress import Progress
from cirrus.service import (
    ColdStartHook,
    EmbeddingRequest,
    EmbeddingResult,
    InferenceRequest,
    StartedGeneration,
    require_task,
)

log = logging.getLogger(__name__)
# A node enforces each request's deadline itself; a stream silent this long past it is stuck.
STUCK_AFTER_DEADLINE_S = 5.0
CLOSE_TIMEOUT_S = 3.0


class ClusterService:
    def __init__(self, catalog: Catalog, fleet: Fleet, request_timeout_s: float) -> None:
        self.catalog = catalog
        self.fleet = fleet
        self.request_timeout_s = request_timeout_s
        self.on_placed: Callable[[str, str, str], None] = lambda model, rule, node: None
        self._background: set[asyncio.Task[None]] = set()

    async def start(self, request: InferenceRequest, progress: Progress | None = None) -> StartedGeneration:
        spec = self._installed_spec(request.model, "text-generation")
        deadline = self._deadline(request.deadline)
        progress = progress or Progress()
        wanted = self.placement_request(spec, request.affinity)
        tried: set[str] = set()
        while True:
            node, placement = self._place(wanted, tried)
            key = uuid.uuid4().hex  # never the caller's id: agents are shared by every gateway

            def finished(placement: Placement = placement) -> None:
                self.fleet.placer.finished(wanted, placement)

            try:
                return await self._open(node, key, request, deadline, progress, finished)
            except NodeLost as lost:
                finished()
                self._drop_quietly(node, key)
                log.warning(
                    "node %s lost before answering %s: %s", node.node_id[:12], request.request_id, lost
                )
                tried.add(node.node_id)
                self._check_time(deadline)
            except BaseException:
                finished()
                raise

    async def embed(self, request: EmbeddingRequest, progress: Progress | None = None) -> EmbeddingResult:
        spec = self._installed_spec(request.model, "text-embeddings")
        unbounded = replace(request, deadline=None)
        outcome: tuple[EmbeddingResult | None, Failed | None] = await self._on_a_node(
            spec,
            self._deadline(request.deadline),
            lambda agent, left_s: agent.embed.remote(unbounded, left_s),
        )
        return _embedded(*outcome, progress or Progress())

    async def count_tokens(
        self, request: InferenceRequest, on_cold_start: ColdStartHook | None = None
    ) -> int:
        """The prompt's tokens, counted by a worker of the model on the node the placer chooses (as for a
        generation, so a warm instance is preferred); nothing is generated. A cold start on the node is not
        reported back (`on_cold_start` is not called): the agent answers the count alone."""
        spec = self._installed_spec(request.model, "text-generation")
        unbounded = replace(request, deadline=None)
        outcome: tuple[int | None, CirrusError | None] = await self._on_a_node(
            spec,
            self._deadline(request.deadline),
            lambda agent, left_s: agent.count_tokens.remote(unbounded, left_s),
        )
        return _counted(*outcome)

    async def _on_a_node(self, spec: ModelSpec, deadline: float, work: Callable[[Any, float], Any]) -> Any:
        """The answer of one call of a node's agent (`work(agent, seconds left)`), on a node the placer chooses,
        counted placed while the call runs; a node lost before it answered is replaced by another within the
        deadline."""
        wanted = self.placement_request(spec, None)
        tried: set[str] = set()
        while True:
            node, placement = self._place(wanted, tried)
            try:
                left_s = self._check_time(deadline)
                return await ray_calls.unless_lost(
                    ray_calls.call(work(node.agent, left_s), left_s + STUCK_AFTER_DEADLINE_S), node.lost
                )
            except NodeLost:
                tried.add(node.node_id)
                self._check_time(deadline)
            finally:
                self.fleet.placer.finished(wanted, placement)

    # -- placing --------------------------------------------------------------------------------------------

    def _installed_spec(self, model: str, task: str) -> ModelSpec:
        spec = self.catalog.get(model)
        require_task(spec, task)
        cached = any(spec.id in node.view.cached for node in self.fleet.reports())
        if spec.artifact.oci is None and not cached:
            hint = f"; install it with: {spec.install_hint}" if spec.install_hint else ""
            raise ModelNotInstalled(
                f"Model {spec.id} is not installed on any node: {spec.artifact.describe()} was not found{hint}",
                param="model",
            )
        return spec

    def placement_request(self, spec: ModelSpec, affinity: str | None) -> PlacementRequest:
        known = [report.sizes[spec.id] for report in self.fleet.reports() if spec.id in report.sizes]
        memory_bytes, artifact_bytes = max(known) if known else (0, 0)
        return PlacementRequest(spec.id, memory_bytes, artifact_bytes, affinity, slots=spec.parallel)

    def _place(self, wanted: PlacementRequest, tried: set[str]) -> tuple[Node, Placement]:
        """The chosen node, counted as placed there; a node the placer knows but the fleet just dropped is
        skipped."""
        while True:
            placement = self._choose(wanted, tried)
            node = self.fleet.placeable(placement.node_id)
            if node is None:
                tried.add(placement.node_id)
                continue
            self.fleet.placer.placed(wanted, placement)
            self.on_placed(wanted.model, placement.rule, placement.node_id)
            return node, placement

    def _choose(self, wanted: PlacementRequest, tried: set[str]) -> Placement:
        try:
            return self.fleet.placer.choose(wanted, exclude=tried)
        except NoNodeFits as error:
            if tried or not any(node.placeable for node in self.fleet.nodes()):
                raise NoNodeAvailable(
                    f"no node of the cluster can take {wanted.model} now", retry_after_s=1.0
                ) from error
            raise ModelTooLarge(str(error), param="model") from error

    def _deadline(self, deadline: float | None) -> float:
        loop = asyncio.get_running_loop()
        return deadline if deadline is not None else loop.time() + self.request_timeout_s

    def _check_time(self, deadline: float) -> float:
        left_s = deadline - asyncio.get_running_loop().time()
        if left_s <= 0:
            raise RequestTimeout("Request timed out before any node answered")
        return left_s

    # -- one attempt ----------------------------------------------------------------------------------------

    async def _open(
        self,
        node: Node,
        key: str,
        request: InferenceRequest,
        deadline: float,
        progress: Progress,
        finished: Callable[[], None],
    ) -> RemoteGeneration:
        """The started answer, which calls `finished` when it closes; if this raises, the caller does."""
        left_s = self._check_time(deadline)
        stream: Any = node.agent.generate.options(num_returns="streaming").remote(
            key, replace(request, deadline=None), left_s
        )
        reader = ray_calls.StreamReader(stream, node.lost)

        async def next_batch() -> Batch | None:
            left_s = deadline - asyncio.get_running_loop().time()
            return await reader.next(max(left_s, 0.0) + STUCK_AFTER_DEADLINE_S)

        async def close_remote() -> Usage | None:
            usage: Usage | None = await ray_calls.call(node.agent.close.remote(key))
            return usage

        def closed() -> None:
            reader.close()
            finished()

        try:
            batch = await next_batch()
            if batch is None:
                raise NodeLost("the stream ended before it began")
            opened, events = first_events(batch, progress)
        except (
            asyncio.CancelledError
        ):  # the client left or the deadline passed: stop it there, bill what it did
            reader.close()
            await self._close_quietly(close_remote, progress)
            raise
        except BaseException:
            reader.close()
            raise
        return RemoteGeneration(opened, events, next_batch, close_remote, progress, closed)

    async def _close_quietly(self, close_remote: Callable[[], Any], progress: Progress) -> None:
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                usage: Usage | None = await close_remote()
            if usage is not None:
                progress.final = usage
        except Exception:
            log.debug("closing a stream failed", exc_info=True)

    def _drop_quietly(self, node: Node, key: str) -> None:
        """Tell a node counted lost to drop the request, in case it was only slow: in the background, bounded."""

        async def drop() -> None:
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    await ray_calls.call(node.agent.close.remote(key))
            except Exception:
                log.debug("node %s did not take the close of %s", node.node_id[:12], key, exc_info=True)

        task = asyncio.ensure_future(drop())
        self._background.add(task)
        task.add_done_callback(self._background.discard)


def _counted(tokens: int | None, error: CirrusError | None) -> int:
    if error is not None:
        raise error
    assert tokens is not None
    return tokens


def _embedded(result: EmbeddingResult | None, failed: Failed | None, progress: Progress) -> EmbeddingResult:
    if failed is not None:
        see_failure(progress, failed)
        raise failed.error
    assert result is not None
    progress.sent = True
    progress.final = result.usage
    return result
