"""Start real worker processes for catalog models, and estimate their memory before doing so."""

import asyncio
import os
import time
from pathlib import Path

import httpx

from cirrus.catalog import Catalog, ModelSpec
from cirrus.catalog.artifacts import materialize
from cirrus.config import Settings
from cirrus.errors import ModelNotInstalled, ModelPullFailed
from cirrus.pool.memory import (
    MemoryEstimate,
    estimate_embedding_instance,
    estimate_instance,
    longest_text,
)
from cirrus.pool.prefix_folders import folder_for, prefix_cache_root
from cirrus.runtime.process import LoadOptions, WorkerProcess
from cirrus.runtime.spares import SpareWorkers
from cirrus.store.blobs import BlobError
from cirrus.store.gguf import MetaValue, read_metadata
from cirrus.store.oci import RegistryError
from cirrus.store.pull import Puller
from cirrus.store.registry_credentials import CredentialStore


def readahead(path: Path) -> None:
    """Ask the kernel to start reading the weights now, while the worker process gets ready to map them."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_WILLNEED)
    finally:
        os.close(descriptor)


class ProcessLauncher:
    def __init__(self, catalog: Catalog, settings: Settings) -> None:
        self._catalog = catalog
        self._settings = settings
        self._estimates: dict[str, MemoryEstimate] = {}
        self._metadata: dict[str, dict[str, MetaValue]] = {}
        self._paths: dict[str, Path] = {}
        self._fetches: dict[str, asyncio.Future[Path]] = {}
        self._text_tokens: dict[str, int] = {}  # embeddings models: the most tokens one text may have
        self.pull_bytes_per_s: float | None = None  # the last registry pull's rate, for a cluster's placement
        self.spares = SpareWorkers(settings.spare_workers, settings.spare_heap_bytes)
        # Registry credentials: CIRRUS_REGISTRY_USERNAME/PASSWORD, else the user's Docker config.
        self._puller = Puller(catalog.cache_dir / "store", CredentialStore.from_settings(settings))

    async def artifact_path(self, spec: ModelSpec) -> Path:
        """Concurrent callers share one fetch: two assemblies or pulls of one file would overwrite each other."""
        if spec.id not in self._paths:
            self._catalog.require_installed(spec.id)
            fetch = self._fetches.get(spec.id)
            if fetch is None:
                fetch = self._fetches[spec.id] = asyncio.ensure_future(self._fetch(spec))
                fetch.add_done_callback(lambda _: self._fetches.pop(spec.id, None))
            self._paths[spec.id] = await asyncio.shield(fetch)
        return self._paths[spec.id]

    async def _fetch(self, spec: ModelSpec) -> Path:
        if spec.artifact.oci is not None:  # a cold start from the registry; concurrent callers share one pull
            try:
                return await self._pull(spec, spec.artifact.oci)
            except (RegistryError, BlobError) as exc:
                raise ModelPullFailed(f"{spec.id} could not be pulled: {exc}", param="model") from exc
            except OSError as exc:  # e.g. a full disk under the cache
                raise ModelPullFailed(
                    f"{spec.id} could not be pulled: cannot write the local cache: {exc}", param="model"
                ) from exc
            except httpx.HTTPError as exc:
                raise ModelPullFailed(
                    f"{spec.id} could not be pulled: {type(exc).__name__}: {exc}", param="model"
                ) from exc
        try:
            return await asyncio.to_thread(materialize, spec.artifact, self._catalog.cache_dir)
        except FileNotFoundError as exc:
            raise ModelNotInstalled(str(exc), param="model") from exc

    async def _pull(self, spec: ModelSpec, reference: str) -> Path:
        pulled_now = not self._catalog.is_present(spec)
        started = time.perf_counter()
        path = await self._puller.fetch(reference, spec.artifact.insecure)
        seconds = time.perf_counter() - started
        if pulled_now and seconds > 0:
            self.pull_bytes_per_s = path.stat().st_size / seconds
        return path

    async def metadata(self, spec: ModelSpec) -> dict[str, MetaValue]:
        """The GGUF's metadata, read once per model: reading it walks the whole vocabulary (27 ms for SmolLM2,
        70 ms for Gemma 3), and both the memory estimate and the chat family need it."""
        if spec.id not in self._metadata:
            self._metadata[spec.id] = await asyncio.to_thread(read_metadata, await self.artifact_path(spec))
        return self._metadata[spec.id]

    async def estimate(self, spec: ModelSpec) -> MemoryEstimate:
        if spec.id not in self._estimates:
            metadata = await self.metadata(spec)
            size = (await self.artifact_path(spec)).stat().st_size
            if spec.task == "text-embeddings":
                tokens = self._text_tokens[spec.id] = longest_text(metadata, spec.context_window)
                self._estimates[spec.id] = estimate_embedding_instance(metadata, size, tokens)
            else:
                self._estimates[spec.id] = estimate_instance(
                    metadata, size, spec.kv_cells, spec.host_cache_cells
                )
        return self._estimates[spec.id]

    def known_sizes(self) -> dict[str, tuple[int, int]]:
        """Model id -> (an instance's memory, the weights file's bytes), for each model estimated so far."""
        return {
            model: (estimate.total, self._paths[model].stat().st_size)
            for model, estimate in self._estimates.items()
            if model in self._paths and self._paths[model].is_file()
        }

    async def estimate_bytes(self, spec: ModelSpec) -> int:
        return (await self.estimate(spec)).total

    def prefix_cache_dir(self, spec: ModelSpec, weights: Path) -> str | None:
        """Where an instance's prefix cache is kept for the next one (runtime.disk_tier): one folder per weights
        file, as it is now, since a saved KV state is only valid for the weights that computed it. None for a
        model without a host tier (embeddings, `host_cache_tokens = 0`): it keeps nothing."""
        if spec.host_cache_cells <= 0 or spec.task == "text-embeddings":
            return None
        return str(folder_for(prefix_cache_root(self._settings.state_dir), weights))

    async def launch(self, spec: ModelSpec) -> WorkerProcess:
        await self.estimate(spec)
        template = spec.chat_template or (await self.metadata(spec)).get("tokenizer.chat_template")
        options = LoadOptions(
            path=str(await self.artifact_path(spec)),
            n_ctx=self._text_tokens.get(spec.id, spec.context_window),
            n_threads=self._settings.threads,
            parallel=spec.parallel,
            kv_cells=spec.kv_cells,
            host_cache_tokens=spec.host_cache_cells,
            prefix_cache_dir=self.prefix_cache_dir(spec, await self.artifact_path(spec)),
            # The worker compiles it while the model loads, rather than read it from the loaded model first.
            chat_template=template if isinstance(template, str) else None,
            embeddings=spec.task == "text-embeddings",
        )
        # A hint, given while the worker is told to load rather than before: waiting for it cost a cold start
        # 0.5-0.8 ms. Its errors are the load's to report (a missing file fails the load as well).
        hint = asyncio.ensure_future(asyncio.to_thread(readahead, Path(options.path)))
        try:
            started = time.perf_counter()
            worker, _ = await self.spares.take()
            worker.process_s = time.perf_counter() - started
            await worker.load(options, self._settings.worker_start_timeout_s)
        finally:
            await asyncio.gather(hint, return_exceptions=True)
        worker.cancel_grace_s = self._settings.worker_cancel_grace_s
        worker.set_watchdog(self._settings.worker_heartbeat_timeout_s, self._settings.worker_stall_s)
        return worker
