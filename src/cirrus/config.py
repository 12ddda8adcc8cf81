"""Settings, read once from the environment (CIRRUS_*) or the CLI and passed down."""

import os
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_BUDGET_FRACTION = 0.8


def machine_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def default_cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "cirrus"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CIRRUS_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8787
    catalog: Path | None = None
    cache_dir: Path = Field(default_factory=default_cache_dir)
    memory_budget_bytes: int | None = None
    request_timeout_s: float = 60.0
    queue_size: int = 32
    threads: int = Field(default_factory=lambda: os.cpu_count() or 1)
    default_keep_alive_s: float = 300.0
    reaper_interval_s: float = 1.0
    worker_start_timeout_s: float = 120.0
    worker_cancel_grace_s: float = 5.0
    spare_workers: int = 1
    spare_heap_bytes: int = 320 * 1024 * 1024
    max_body_bytes: int = 4 * 1024 * 1024

    def budget_bytes(self) -> int:
        if self.memory_budget_bytes is not None:
            return self.memory_budget_bytes
        return int(machine_memory_bytes() * DEFAULT_BUDGET_FRACTION)
