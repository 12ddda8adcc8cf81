"""Start real worker processes for catalog models, and estimate their memory before doing so."""

import asyncio
import os
import time
from pathlib import Path

from cirrus.catalog import Catalog, ModelSpec
from cirrus.catalog.artifacts import materialize
from cirrus.config import Settings
from cirrus.errors import ModelNotInstalled
from cirrus.pool.memory import MemoryEstimate, estimate_instance
from cirrus.runtime.process import LoadOptions, WorkerProcess
from cirrus.runtime.spares import SpareWorkers
from cirrus.store.gguf import read_metadata


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
        self._paths: dict[str, Path] = {}
        self.spares = SpareWorkers(settings.spare_workers, settings.spare_heap_bytes)

    async def artifact_path(self, spec: ModelSpec) -> Path:
        if spec.id not in self._paths:
            self._catalog.require_installed(spec.id)
            try:
                path = await asyncio.to_thread(materialize, spec.artifact, self._catalog.cache_dir)
            except FileNotFoundError as exc:
                raise ModelNotInstalled(str(exc), param="model") from exc
            self._paths[spec.id] = path
        return self._paths[spec.id]

    async def estimate(self, spec: ModelSpec) -> MemoryEstimate:
        if spec.id not in self._estimates:
            path = await self.artifact_path(spec)
            metadata = await asyncio.to_thread(read_metadata, path)
            self._estimates[spec.id] = estimate_instance(metadata, path.stat().st_size, spec.kv_cells)
        return self._estimates[spec.id]

    async def estimate_bytes(self, spec: ModelSpec) -> int:
        return (await self.estimate(spec)).total

    async def launch(self, spec: ModelSpec) -> WorkerProcess:
        options = LoadOptions(
            path=str(await self.artifact_path(spec)),
            n_ctx=spec.context_window,
            n_threads=self._settings.threads,
            parallel=spec.parallel,
            kv_cells=spec.kv_cells,
            chat_template=spec.chat_template,
        )
        await asyncio.to_thread(readahead, Path(options.path))
        started = time.perf_counter()
        worker, _ = await self.spares.take()
        worker.process_s = time.perf_counter() - started
        await worker.load(options, self._settings.worker_start_timeout_s)
        worker.cancel_grace_s = self._settings.worker_cancel_grace_s
        return worker
