"""Settings, read once from the environment (CIRRUS_*) or the CLI and passed down."""

import os
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_BUDGET_FRACTION = 0.8


def machine_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def default_cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "cirrus"


def default_state_dir() -> Path:
    return Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "cirrus"


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
    max_body_bytes: int = 10 * 1024 * 1024
    max_prompt_chars: int = 131072

    # The gateway: identity, limits, metering, caching, observability.
    state_dir: Path = Field(default_factory=default_state_dir)
    database: str | None = Field(
        default=None, description="a SQLite file path or a postgresql:// DSN (default: state_dir/cirrus.db)"
    )
    redis_url: str | None = Field(
        default=None, description="shared rate limits and response cache for several gateways"
    )
    allow_open: bool = Field(
        default=False, description="serve without tokens on an address other than loopback"
    )
    auth_cache_ttl_s: float = 2.0
    daily_free_neurons: float = 10_000.0
    alert_webhook_url: str | None = None
    cache_ttl_s: float = Field(
        default=0.0,
        description="response cache lifetime for requests that set none; 0 caches only requests that send "
        "cf-aig-cache-ttl (AI Gateway's default: caching is off until enabled)",
    )
    metrics_token_required: bool = False
    log_prompts: bool = False

    # Pulling from and pushing to OCI registries that want credentials (else ~/.docker/config.json's are used).
    registry_username: str | None = None
    registry_password: SecretStr | None = Field(default=None, description="a password or an access token")
    registry_host: str | None = Field(
        default=None, description="send the registry credentials only to this host (default: any that asks)"
    )

    def database_url(self) -> str:
        return self.database or str(self.state_dir / "cirrus.db")

    def budget_bytes(self) -> int:
        if self.memory_budget_bytes is not None:
            return self.memory_budget_bytes
        return int(machine_memory_bytes() * DEFAULT_BUDGET_FRACTION)
