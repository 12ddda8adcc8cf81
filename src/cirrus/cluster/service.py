"""The gateway's backend on a cluster: each request is placed on a node (`cirrus.placement`) and run by that
node's agent; the same interface as the single node's `InferenceService` (`service.Backend`).

Failover: a node that is lost before the request's first byte (Ray says its actor or node died, or the fleet
counts it lost) costs nothing but time: the request is placed again, on another node, within its deadline. Once
the answer began, a lost node ends it with the protocol's error frame (`RemoteGeneration`).
"""

import asyncio
import itertools
import logging
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
    EmbeddingRequest,
    EmbeddingResult,
    InferenceRequest,
    StartedGeneration,
    require_task,
)

log = logging.getLogger(__name__)
_streams = itertools.count(1)


class ClusterService:
    def __init__(self, catalog: Catalog, fleet: Fleet, request_timeout_s: float) -> None:
        self.catalog = catalog
        self.fleet = fleet
        self.request_timeout_s = request_timeout_s
        self.on_placed: Callable[[str, str, str], None] = lambda model, rule, node: None

    async def start(self, request: InferenceRequest, progress: Progress | None = None) -> StartedGeneration:
        spec = self._installed_spec(request.model, "text-generation")
        deadline = self._deadline(request.deadline)
        progress = progress or Progress()
        wanted = self.placement_request(spec, request.affinity)
        tried: set[str] = set()
        while True:
            node, placement = self._place(wanted, tried)
            try:
                return await self._open(node, placement, wanted, request, deadline, progress)
            except NodeLost as lost:
                log.warning(
                    "node %s lost before answering %s: %s", node.node_id[:12], request.request_id, lost
                )
                tried.add(node.node_id)
                self._check_time(deadline)

    async def embed(self, request: EmbeddingRequest, progress: Progress | None = None) -> EmbeddingResult:
        spec = self._installed_spec(request.model, "text-embeddings")
        deadline = self._deadline(request.deadline)
        progress = progress or Progress()
        wanted = self.placement_request(spec, None)
        tried: set[str] = set()
        while True:
            node, placement = self._place(wanted, tried)
            try:
                left_s = self._check_time(deadline)
                outcome: tuple[EmbeddingResult | None, Failed | None] = await ray_calls.call(
                    node.agent.embed.remote(replace(request, deadline=None), left_s), left_s + 5
                )
            except NodeLost:
                tried.add(node.node_id)
                self._check_time(deadline)
                continue
            finally:
                self.fleet.placer.finished(wanted, placement)
            return _embedded(*outcome, progress)

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
        try:
            placement = self.fleet.placer.choose(wanted, exclude=tried)
        except NoNodeFits as error:
            if tried or not self.fleet.reports():
                raise NoNodeAvailable(
                    f"no node of the cluster can take {wanted.model} now", retry_after_s=1.0
                ) from error
            raise ModelTooLarge(str(error), param="model") from error
        self.fleet.placer.placed(wanted, placement)
        self.on_placed(wanted.model, placement.rule, placement.node_id)
        return self.fleet.node(placement.node_id), placement

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
        placement: Placement,
        wanted: PlacementRequest,
        request: InferenceRequest,
        deadline: float,
        progress: Progress,
    ) -> RemoteGeneration:
        key = f"{request.request_id}@{next(_streams)}"
        left_s = self._check_time(deadline)
        remote = replace(request, deadline=None)
        stream: Any = node.agent.generate.options(num_returns="streaming").remote(key, remote, left_s)
        lost = node.lost

        def finished() -> None:
            self.fleet.placer.finished(wanted, placement)

        try:
            batch = await ray_calls.next_batch(stream, lost)
            if batch is None:
                raise NodeLost("the stream ended before it began")
            opened, events = first_events(batch, progress)
        except BaseException as error:
            finished()
            if not isinstance(
                error, CirrusError | NodeLost
            ):  # cancelled: stop it there, and bill what it did
                await _close_quietly(node, key, progress)
            raise

        async def close_remote() -> Usage:
            usage: Usage = await ray_calls.call(node.agent.close.remote(key))
            return usage

        async def next_batch() -> Batch | None:
            return await ray_calls.next_batch(stream, lost)

        return RemoteGeneration(opened, events, next_batch, close_remote, progress, finished)


async def _close_quietly(node: Node, key: str, progress: Progress) -> None:
    try:
        async with asyncio.timeout(3.0):
            progress.final = await ray_calls.call(node.agent.close.remote(key))
    except Exception:
        log.debug("closing stream %s failed", key, exc_info=True)


def _embedded(result: EmbeddingResult | None, failed: Failed | None, progress: Progress) -> EmbeddingResult:
    if failed is not None:
        see_failure(progress, failed)
        progress.sent = failed.started
        raise failed.error
    assert result is not None
    progress.sent = True
    progress.final = result.usage
    return result
