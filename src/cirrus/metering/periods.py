"""The UTC calendar periods that allocations and limits reset on: days ('YYYY-MM-DD') and months ('YYYY-MM')."""

from datetime import UTC, date, datetime, timedelta


def _utc(unix_s: float) -> datetime:
    return datetime.fromtimestamp(unix_s, UTC)


def utc_day(unix_s: float) -> str:
    return _utc(unix_s).strftime("%Y-%m-%d")


def utc_month(unix_s: float) -> str:
    return _utc(unix_s).strftime("%Y-%m")


def seconds_to_next_day(unix_s: float) -> float:
    now = _utc(unix_s)
    midnight = datetime(now.year, now.month, now.day, tzinfo=UTC) + timedelta(days=1)
    return midnight.timestamp() - unix_s


def seconds_to_next_month(unix_s: float) -> float:
    now = _utc(unix_s)
    year, month = (now.year + 1, 1) if now.month == 12 else (now.year, now.month + 1)
    return datetime(year, month, 1, tzinfo=UTC).timestamp() - unix_s


def month_bounds(month: str) -> tuple[str, str]:
    """The first and the last possible day of a month, for `day BETWEEN ? AND ?`."""
    return f"{month}-01", f"{month}-31"


def is_day(text: str) -> bool:
    try:
        return date.fromisoformat(text).isoformat() == text
    except ValueError:
        return False
