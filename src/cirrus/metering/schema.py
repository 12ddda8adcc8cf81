"""Metering tables: one row per request, daily totals kept by a trigger, and the budget alerts already sent.

`usage_daily` is maintained by a trigger on `usage_events` rather than by a second statement from Python: the
Database interface has no multi-statement transaction, and the trigger makes each event and its share of the
daily totals one atomic write. Because an event whose id is already stored is skipped (ON CONFLICT DO NOTHING)
and the trigger fires only for rows really inserted, writing the same records twice (a retry after a lost
acknowledgement, a replayed reconcile file) never counts them twice. The statement inside the trigger is the
same on both engines; only its wrapper differs.
"""

COUNTERS = (
    "requests",
    "errors",
    "cache_hits",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "neurons",
    "cost_usd",
)
EVENT_COLUMNS = (
    "event_id",
    "day",
    "request_id",
    "account_id",
    "token_id",
    "model",
    "status",
    "error_code",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "queue_s",
    "cold_start",
    "execution_s",
    "neurons",
    "cost_usd",
    "cache_status",
    "started_at",
    "route",
    "stream",
    "step",
    "attempts",
    "ttft_ms",
)

USAGE_EVENTS = """
CREATE TABLE IF NOT EXISTS usage_events (
    event_id TEXT PRIMARY KEY,
    day TEXT NOT NULL,
    request_id TEXT NOT NULL,
    account_id TEXT NOT NULL,
    token_id TEXT,
    model TEXT NOT NULL,
    status BIGINT NOT NULL,
    error_code BIGINT,
    prompt_tokens BIGINT NOT NULL,
    completion_tokens BIGINT NOT NULL,
    cached_tokens BIGINT NOT NULL,
    queue_s DOUBLE PRECISION NOT NULL,
    cold_start BIGINT NOT NULL,
    execution_s DOUBLE PRECISION NOT NULL,
    neurons DOUBLE PRECISION NOT NULL,
    cost_usd DOUBLE PRECISION NOT NULL,
    cache_status TEXT NOT NULL,
    started_at DOUBLE PRECISION NOT NULL,
    route TEXT NOT NULL,
    stream BIGINT NOT NULL,
    step BIGINT NOT NULL,
    attempts BIGINT NOT NULL,
    ttft_ms DOUBLE PRECISION
)"""

# Columns added to `usage_events` after it was first created: a table made before them gets them by migration
# (`UsageStore.migrate`). Each is nullable, so adding it rewrites no row on either engine.
ADDED_EVENT_COLUMNS = (("ttft_ms", "DOUBLE PRECISION"),)
COLUMN_EXISTS = {
    "sqlite": "SELECT COUNT(*) FROM pragma_table_info('usage_events') WHERE name = ?",
    "postgresql": (
        "SELECT COUNT(*) FROM information_schema.columns "
        "WHERE table_schema = current_schema() AND table_name = 'usage_events' AND column_name = ?"
    ),
}

USAGE_DAILY = """
CREATE TABLE IF NOT EXISTS usage_daily (
    account_id TEXT NOT NULL,
    token_id TEXT NOT NULL,
    model TEXT NOT NULL,
    day TEXT NOT NULL,
    requests BIGINT NOT NULL,
    errors BIGINT NOT NULL,
    cache_hits BIGINT NOT NULL,
    prompt_tokens BIGINT NOT NULL,
    completion_tokens BIGINT NOT NULL,
    cached_tokens BIGINT NOT NULL,
    neurons DOUBLE PRECISION NOT NULL,
    cost_usd DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (account_id, token_id, model, day)
)"""

INDEXES = (
    "CREATE INDEX IF NOT EXISTS usage_daily_by_account_day ON usage_daily (account_id, day)",
    "CREATE INDEX IF NOT EXISTS usage_daily_by_token_day ON usage_daily (token_id, day)",
)

# Made once the added columns exist (`UsageStore.migrate`), in place of the indexes made before ttft_ms, which
# they cover (so they are dropped). Retention deletes by age (metering/retention.py); the console reads the last
# hour (its traffic and TTFT), an account's latest records, and one request's records by its id. The two on start
# times carry ttft_ms, so the TTFT percentiles read the index alone, never the rows. A request's records are found
# by (request_id, account_id): with equality on both columns, SQLite never prefers the account's index for them.
# On a large existing PostgreSQL table, create these by hand first with CREATE INDEX CONCURRENTLY, or the first
# migration holds a lock while they build.
EVENT_INDEXES = (
    "CREATE INDEX IF NOT EXISTS usage_events_by_started_at_ttft ON usage_events (started_at, ttft_ms)",
    "CREATE INDEX IF NOT EXISTS usage_events_by_account_started_at_ttft "
    "ON usage_events (account_id, started_at, ttft_ms)",
    "CREATE INDEX IF NOT EXISTS usage_events_by_request_account ON usage_events (request_id, account_id)",
    "DROP INDEX IF EXISTS usage_events_by_started_at",
    "DROP INDEX IF EXISTS usage_events_by_account_started_at",
    "DROP INDEX IF EXISTS usage_events_by_request_id",
)

_ADD_TO_DAY = ", ".join(f"{c} = usage_daily.{c} + excluded.{c}" for c in COUNTERS)
ROLLUP = f"""
INSERT INTO usage_daily (account_id, token_id, model, day, {", ".join(COUNTERS)})
VALUES (
    NEW.account_id, COALESCE(NEW.token_id, ''), NEW.model, NEW.day, 1,
    CASE WHEN NEW.status >= 400 OR NEW.error_code IS NOT NULL THEN 1 ELSE 0 END,
    CASE WHEN NEW.cache_status = 'HIT' THEN 1 ELSE 0 END,
    NEW.prompt_tokens, NEW.completion_tokens, NEW.cached_tokens, NEW.neurons, NEW.cost_usd
)
ON CONFLICT (account_id, token_id, model, day) DO UPDATE SET {_ADD_TO_DAY}"""

SQLITE_TRIGGER = f"""
CREATE TRIGGER IF NOT EXISTS usage_events_rollup AFTER INSERT ON usage_events
BEGIN {ROLLUP};
END"""

POSTGRES_TRIGGER = (
    f"""
CREATE OR REPLACE FUNCTION usage_events_rollup() RETURNS trigger LANGUAGE plpgsql AS $rollup$
BEGIN {ROLLUP};
    RETURN NULL;
END
$rollup$""",
    """
CREATE OR REPLACE TRIGGER usage_events_rollup AFTER INSERT ON usage_events
FOR EACH ROW EXECUTE FUNCTION usage_events_rollup()""",
)

BUDGET_ALERTS = """
CREATE TABLE IF NOT EXISTS budget_alerts (
    scope TEXT NOT NULL,
    subject TEXT NOT NULL,
    period TEXT NOT NULL,
    threshold BIGINT NOT NULL,
    used DOUBLE PRECISION NOT NULL,
    limit_value DOUBLE PRECISION NOT NULL,
    sent_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (scope, subject, period, threshold)
)"""


def usage_schema(dialect: str) -> list[str]:
    trigger = [SQLITE_TRIGGER] if dialect == "sqlite" else list(POSTGRES_TRIGGER)
    return [USAGE_EVENTS, USAGE_DAILY, *INDEXES, *trigger]


def add_event_column(dialect: str, column: str, kind: str) -> str:
    """PostgreSQL's IF NOT EXISTS makes a concurrent migration harmless; SQLite has none (see the store)."""
    guard = "IF NOT EXISTS " if dialect == "postgresql" else ""
    return f"ALTER TABLE usage_events ADD COLUMN {guard}{column} {kind}"


def alerts_schema() -> list[str]:
    return [BUDGET_ALERTS]
