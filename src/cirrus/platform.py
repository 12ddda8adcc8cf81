"""Everything a Cirrus node runs, wired together once: catalog, pool, service, the keep-alive reaper and, for
the HTTP server, the gateway (identities, limits, metering, cache) in front of them.

The HTTP server and the embedded SDK (`Ai.local()`, which has no gateway) both run one of these.
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, Protocol

from cirrus.catalog import Catalog, ModelSpec, load_catalog
from cirrus.catalog.registered import registered_models_path
from cirrus.config import Settings
from cirrus.gateway.components import GatewayParts, NodeAuthenticator
from cirrus.gateway.pipeline import Pipeline
from cirrus.metering.store import UsageStore
from cirrus.observability.fleet_collector import NodeMetrics
from cirrus.observability.metrics import Metrics
from cirrus.observability.pool_collector import PoolSource
from cirrus.pool import Pool
from cirrus.pool.launcher import ProcessLauncher
from cirrus.pool.prefix_folders import prefix_cache_root, remove_stale_folders
from cirrus.service import Backend, InferenceService
from cirrus.store.gguf import MetaValue

log = logging.getLogger(__name__)


class ModelFiles(Protocol):
    async def metadata(self, spec: ModelSpec) -> dict[str, MetaValue]: ...


class ClusterNodes(Protocol):
    """A cluster's nodes, seen from a gateway (`cirrus.cluster.cluster.Cluster`): requests run there, not here."""

    @property
    def service(self) -> Backend: ...

    @property
    def model_files(self) -> ModelFiles: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def node_summaries(self) -> list[dict[str, Any]]: ...

    def instances(self) -> list[dict[str, Any]]: ...

    async def prewarm(self, spec: ModelSpec) -> dict[str, Any]: ...

    async def unload(self, model: str) -> int: ...

    def node_metrics(self) -> list[NodeMetrics]: ...

    def on_placed(self, observe: Callable[[str, str, str], None]) -> None: ...


class Platform:
    """On a cluster (`cluster` given), the gateway runs requests on the cluster's nodes: this process's own pool
    stays empty and starts nothing."""

    def __init__(
        self,
        settings: Settings,
        catalog: Catalog | None = None,
        *,
        gateway: bool = True,
        cluster: ClusterNodes | None = None,
    ) -> None:
        self.settings = settings
        self.catalog = catalog or load_catalog(
            settings.catalog, settings.cache_dir, registered_models_path(settings.state_dir)
        )
        self.launcher = ProcessLauncher(self.catalog, settings)
        budget = settings.budget_bytes() - self.launcher.spares.reserved_bytes
        self.pool = Pool(
            self.launcher, budget, settings.queue_size, settings.default_keep_alive_s, cores=settings.threads
        )
        self.launcher.spares.until_idle = self.pool.until_idle
        self.service = InferenceService(self.catalog, self.pool, settings.request_timeout_s)
        self.cluster = cluster
        self.backend: Backend = cluster.service if cluster is not None else self.service
        self.model_files: ModelFiles = cluster.model_files if cluster is not None else self.launcher
        self.metrics = self._metrics()
        self._with_gateway = gateway
        self._gateway: GatewayParts | None = None
        self._pipeline: Pipeline | None = None
        self._background: list[asyncio.Task[None]] = []

    def _metrics(self) -> Metrics:
        if self.cluster is not None:
            metrics = Metrics(fleet=self.cluster.node_metrics)
            self.cluster.on_placed(metrics.placed)
            return metrics
        return Metrics(
            PoolSource(
                self.pool,
                spares_ready=lambda: self.spare_workers_ready,
                model_ids=lambda: [entry.spec.id for entry in self.catalog.entries()],
            )
        )

    @property
    def gateway(self) -> GatewayParts:
        if self._gateway is None:
            raise RuntimeError("the gateway is not open: start the platform first")
        return self._gateway

    @property
    def pipeline(self) -> Pipeline:
        if self._pipeline is None:
            raise RuntimeError("the gateway is not open: start the platform first")
        return self._pipeline

    @property
    def usage_store(self) -> UsageStore:
        return self.gateway.usage_store

    @property
    def spare_workers_ready(self) -> int:
        """Spare worker processes started ahead, waiting to become a model's worker (none on a cluster gateway,
        whose requests run on the nodes)."""
        return len(self.spare_worker_pids)

    @property
    def spare_worker_pids(self) -> list[int]:
        return self.launcher.spares.pids

    @property
    def gateway_open(self) -> bool:
        return self._gateway is not None

    def authenticator(self) -> NodeAuthenticator | None:
        """None until the gateway is open, and on a node without one (the embedded SDK)."""
        return self._gateway.authenticator if self._gateway is not None else None

    async def start(self) -> None:
        if self._with_gateway:
            self._gateway = await GatewayParts.open(self.settings, self.catalog, self.backend, self.metrics)
            self._pipeline = Pipeline(self._gateway)
        if self.cluster is not None:
            await self.cluster.start()
            return
        self._background.append(asyncio.create_task(self.launcher.spares.fill()))
        self._background.append(asyncio.create_task(self.pool.run_reaper(self.settings.reaper_interval_s)))
        interval = self.settings.worker_heartbeat_interval_s
        self._background.append(asyncio.create_task(self.pool.run_watchdog(interval)))
        for entry in self.catalog.entries():
            if entry.spec.pinned and entry.installed:
                self._background.append(asyncio.create_task(self._prewarm_pinned(entry.spec.id)))
        present = [entry.spec for entry in self.catalog.entries() if self.catalog.is_present(entry.spec)]
        self._background.append(asyncio.create_task(self._learn_models(present)))
        self._background.append(asyncio.create_task(self._remove_stale_prefix_folders()))

    async def _learn_models(self, specs: list[ModelSpec]) -> None:
        """Read the GGUF metadata a model's first request needs before its cold start (memory estimate, chat
        family) ahead. A file that cannot be read is left for that request to report."""
        for spec in specs:
            with contextlib.suppress(Exception):
                await self.launcher.estimate(spec)

    async def _remove_stale_prefix_folders(self) -> None:
        try:
            await asyncio.to_thread(remove_stale_folders, prefix_cache_root(self.settings.state_dir))
        except OSError:  # the state folder unreadable: nothing removed, nothing else affected
            log.exception("could not look for stale prefix-cache folders")

    async def _prewarm_pinned(self, model_id: str) -> None:
        try:
            await self.pool.prewarm(self.catalog.get(model_id), self.settings.worker_start_timeout_s)
        except Exception:  # a pinned model that fails to start is reported, not fatal to the node
            log.exception("could not prewarm pinned model %s", model_id)

    async def close(self) -> None:
        for task in self._background:
            task.cancel()
        for task in self._background:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.pool.close()
        await self.launcher.spares.close()
        if self._pipeline is not None:
            await self._pipeline.drain()
        if self.cluster is not None:
            await self.cluster.close()
        if self._gateway is not None:
            await self._gateway.close()
