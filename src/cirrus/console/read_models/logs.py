"""The Logs page's rows: an account's latest requests, with the metered fields of their usage records.

They are read from `usage_events`, where every metered request lands (README, Metering). Prompts and answers
are never stored there: when collected (`cf-aig-collect-log`, a token's `--collect-log`, CIRRUS_LOG_PROMPTS)
they go only into the JSON request log on stderr, so the console never shows them.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from cirrus.metering.record import UsageRecord
from cirrus.metering.store import StatusFilter, UsageStore

PAGE_SIZE = 100
STATUS_CHOICES = ("ok", "error")


class FilterError(ValueError):
    """A query parameter the page cannot use; its message says which and why."""


@dataclass(frozen=True)
class LogFilters:
    account_id: str
    model: str | None = None
    token_id: str | None = None
    status: StatusFilter = None  # "ok", "error" or one HTTP status
    before: float | None = None  # a start time: the page holds the records that started earlier

    @classmethod
    def parse(cls, account_id: str, params: Mapping[str, str]) -> "LogFilters":
        return cls(
            account_id,
            params.get("model") or None,
            params.get("token") or None,
            parse_status(params.get("status") or ""),
            parse_before(params.get("before") or ""),
        )

    def query(self, **changes: str) -> dict[str, str]:
        """The filters as query parameters (for the next page's link), with `changes` applied."""
        values = {"account": self.account_id, "model": self.model or "", "token": self.token_id or ""}
        values["status"] = "" if self.status is None else str(self.status)
        values.update(changes)
        return {k: v for k, v in values.items() if v}


def parse_status(text: str) -> StatusFilter:
    text = text.strip().lower()
    if not text:
        return None
    if text == "ok" or text == "error":
        return "ok" if text == "ok" else "error"
    if text.isdigit() and 100 <= int(text) <= 599:
        return int(text)
    raise FilterError(f"'status' is ok, error or an HTTP status such as 429, not {text!r}")


def parse_before(text: str) -> float | None:
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise FilterError(f"'before' must be a Unix time, not {text!r}") from None


def utc_time(unix_s: float) -> str:
    """`2025-03-14 18:00:00.123`: what the page shows in its time column (UTC)."""
    return datetime.fromtimestamp(unix_s, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def is_error(record: UsageRecord) -> bool:
    """As the daily totals count errors (metering/schema.py)."""
    return record.status >= 400 or record.error_code is not None


@dataclass(frozen=True)
class LogPage:
    filters: LogFilters
    records: list[UsageRecord]  # newest first
    older: float | None  # `before` for the next page; None on the last page


class RequestLog:
    def __init__(self, usage: UsageStore, page_size: int = PAGE_SIZE) -> None:
        self._usage = usage
        self._page_size = page_size

    async def page(self, filters: LogFilters) -> LogPage:
        records = await self._usage.recent_events(
            filters.account_id,
            model=filters.model,
            token_id=filters.token_id,
            status=filters.status,
            before=filters.before,
            limit=self._page_size + 1,  # one more tells whether an older page exists
        )
        shown = records[: self._page_size]
        older = shown[-1].started_at if len(records) > self._page_size else None
        return LogPage(filters, shown, older)

    async def request(self, account_id: str, request_id: str) -> list[UsageRecord]:
        """Every record of one request id in the account (a caller may send the same id twice)."""
        return await self._usage.request_events(account_id, request_id)
