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
    # Workers: watchdog. Every loaded worker is pinged each interval; one that leaves pings unanswered for the
    # heartbeat timeout (stopped, or paging to death), or completes no engine step for the stall time while it
    # has requests, is killed and its instance replaced. A ping unanswered for one interval already keeps new
    # requests off it (its instance shows as `unresponsive`).
    worker_heartbeat_interval_s: float = Field(default=1.0, gt=0)
    worker_heartbeat_timeout_s: float = Field(default=3.0, gt=0)
    worker_stall_s: float = Field(default=30.0, gt=0)
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
    cluster: str | None = Field(
        default=None,
        description="a Ray cluster's address (HOST:PORT, or auto for RAY_ADDRESS): run requests on its nodes",
    )
    cluster_node_ip: str | None = Field(
        default=None,
        description="the address of this machine's Ray node, where Ray should not guess it (e.g. a loopback one)",
    )
    # Redis: deadlines and breaker
    redis_timeout_s: float = Field(
        default=0.25, gt=0, description="the most one Redis call may take, its retry included"
    )
    redis_probe_after_s: float = Field(
        default=2.0, gt=0, description="after Redis fails it is skipped this long, then one request probes it"
    )
    allow_open: bool = Field(
        default=False, description="serve without tokens on an address other than loopback"
    )
    auth_cache_ttl_s: float = 2.0
    console_session_hours: float = Field(
        default=12.0,
        gt=0,
        description="how long a console sign-in lasts (its token's expiry or revocation ends it sooner)",
    )
    daily_free_neurons: float = 10_000.0
    alert_webhook_url: str | None = None
    cache_ttl_s: float = Field(
        default=0.0,
        description="response cache lifetime for requests that set none; 0 caches only requests that send "
        "cf-aig-cache-ttl (AI Gateway's default: caching is off until enabled)",
    )
    metrics_token_required: bool = False
    log_prompts: bool = False

    # Budgets: reservations (what an admitted request holds against its budget until it is metered)
    budget_chars_per_token: float = Field(
        default=4.0,
        gt=0,
        description="prompt characters per token, to estimate a prompt before it is tokenized",
    )
    budget_prompt_overhead_tokens: int = Field(
        default=32, ge=0, description="tokens added to each prompt's estimate for the chat template's markup"
    )

    # The database: deadlines (PostgreSQL; db/guard.py). While it is down or frozen, callers get 503 / 3057 fast.
    database_timeout_s: float = Field(
        default=2.0, gt=0, description="the most one database call may take: a pooled connection, a statement"
    )
    database_pool_size: int = Field(default=10, gt=0, description="connections one gateway may hold")
    database_retry_after_s: float = Field(
        default=2.0, gt=0, description="after a database failure, calls skip it this long, then one probes it"
    )
    auth_stale_if_error_s: float = Field(
        default=300.0,
        ge=0,
        description="while the database is unavailable, a token this gateway checked keeps working this long past "
        "auth_cache_ttl_s (with its account's last known plan); a token revoked just before the outage too",
    )

    # The edge: connections and headers, enforced by the HTTP server before the app (server/edge_protocol.py).
    max_header_bytes: int = Field(
        default=64 * 1024, gt=0, description="request line plus headers; a larger head is answered 431"
    )
    max_headers: int = Field(
        default=100, gt=0, description="header fields per request; more are answered 431"
    )
    header_timeout_s: float = Field(
        default=10.0, gt=0, description="a head not complete this long after it began is answered 408, closed"
    )
    keep_alive_timeout_s: int = Field(
        default=5, gt=0, description="an idle keep-alive connection is closed after this many seconds"
    )
    max_connections: int = Field(
        default=1024,
        ge=0,
        description="open connections in all; one more is answered 503 at once (0: no cap)",
    )
    max_connections_per_client: int = Field(
        default=64, ge=0, description="open connections per client address (behind a proxy: the proxy's)"
    )

    # Usage retention: per-request usage rows are deleted after this many days; per-day totals are kept.
    usage_retention_days: float = Field(
        default=90.0, ge=0, description="how long per-request usage rows are kept (0: forever)"
    )
    usage_retention_interval_s: float = Field(default=3600.0, gt=0, description="how often expired rows go")
    # The Responses API's stored responses (`store: true`), kept for `previous_response_id` and GET, as OpenAI's.
    responses_retention_days: float = Field(
        default=30.0, gt=0, description="how long stored responses are kept"
    )
    # The async Batch API: items run in the background, in the slots interactive requests leave free.
    batch_concurrency: int = Field(default=4, ge=1, description="batch items one gateway runs at once")
    batch_max_items: int = Field(default=10_000, ge=1, description="requests in one batch")
    batch_max_queued_per_account: int = Field(
        default=100_000, ge=1, description="items an account may have queued or running"
    )
    batch_window_s: float = Field(
        default=86_400.0, gt=0, description="a batch expires this long after it is sent"
    )
    batch_item_timeout_s: float = Field(
        default=3600.0, gt=0, description="time limit of one item, its wait for a free slot included"
    )
    batch_retention_days: float = Field(default=30.0, gt=0, description="how long finished batches are kept")
    batch_lease_s: float = Field(
        default=60.0,
        gt=0,
        description="an item held by a gateway that stopped answering runs elsewhere after this",
    )

    # LoRA fine-tunes (Workers AI's /ai/finetunes): PEFT adapters uploaded per account, converted to GGUF.
    finetune_max_per_account: int = Field(default=100, ge=1, description="finetunes one account may have")
    finetune_max_rank: int = Field(
        default=32, ge=1, description="the highest LoRA rank r an adapter may have"
    )
    finetune_max_asset_bytes: int = Field(
        default=300 * 1024 * 1024,
        ge=1,
        description="the largest adapter file accepted (its upload's body may be 1 MiB larger, for the form)",
    )
    finetune_convert_timeout_s: float = Field(
        default=600.0, gt=0, description="the longest one adapter's conversion to GGUF may take"
    )

    # AI Search (RAG): instances of documents an account uploads, chunked, embedded and indexed in the background.
    ai_search_max_file_bytes: int = Field(
        default=4 * 1024 * 1024,
        ge=1,
        description="the largest file one item may be (Cloudflare's limit: 4 MiB)",
    )
    ai_search_max_instances: int = Field(
        default=20, ge=1, description="AI Search instances one account may have"
    )
    ai_search_ingest_concurrency: int = Field(
        default=2, ge=1, description="files one gateway chunks and embeds at once"
    )
    ai_search_lease_s: float = Field(
        default=60.0,
        gt=0,
        description="a file being indexed by a gateway that stopped answering is indexed elsewhere after this",
    )

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
