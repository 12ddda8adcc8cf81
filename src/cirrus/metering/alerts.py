"""Budget alerts: a warning and a webhook when usage crosses 50, 80 and 100% of an allocation or a limit.

Each (scope, subject, period, threshold) is announced once across every gateway sharing the database: the
process whose insert into `budget_alerts` succeeds sends it. A webhook that fails is logged, not retried.
"""

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from cirrus.db.database import Database
from cirrus.metering.neurons import format_usd
from cirrus.metering.schema import alerts_schema

log = logging.getLogger(__name__)
THRESHOLDS = (50, 80, 100)
Scope = Literal["daily_neurons", "monthly_spend"]
CLAIM = (
    "INSERT INTO budget_alerts (scope, subject, period, threshold, used, limit_value, sent_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (scope, subject, period, threshold) DO NOTHING"
)


@dataclass(frozen=True)
class BudgetUse:
    """How much of one allocation (an account's day) or limit (a token's month) is used."""

    scope: Scope
    subject: str  # the account id for daily_neurons, the token id for monthly_spend
    period: str
    used: float
    limit: float
    account_id: str
    token_id: str | None = None

    def crossed(self, thresholds: tuple[int, ...]) -> list[int]:
        if self.limit <= 0:
            return []
        return [t for t in thresholds if self.used >= self.limit * t / 100]

    def message(self, threshold: int) -> str:
        if self.scope == "daily_neurons":
            return (
                f"Account {self.account_id} has used {threshold}% of its daily allocation of "
                f"{self.limit:,.0f} neurons ({self.used:,.0f} neurons on {self.period} UTC)."
            )
        return (
            f"Token {self.subject} of account {self.account_id} has used {threshold}% of its monthly spend "
            f"limit of {format_usd(self.limit)} ({format_usd(self.used)} in {self.period})."
        )

    def payload(self, threshold: int) -> dict[str, Any]:
        return {
            "type": "budget_alert",
            "scope": self.scope,
            "account_id": self.account_id,
            "token_id": self.token_id,
            "period": self.period,
            "threshold_percent": threshold,
            "used": self.used,
            "limit": self.limit,
            "unit": "neurons" if self.scope == "daily_neurons" else "usd",
            "message": self.message(threshold),
        }


class BudgetAlerts:
    def __init__(
        self,
        db: Database,
        webhook_url: str | None,
        *,
        clock: Callable[[], float] = time.time,
        timeout_s: float = 2.0,
        thresholds: tuple[int, ...] = THRESHOLDS,
    ) -> None:
        self._db = db
        self._url = webhook_url
        self._clock = clock
        self._timeout_s = timeout_s
        self._thresholds = thresholds
        self._announced: dict[tuple[Scope, str, int], str] = {}  # -> the last period this process claimed
        self._tasks: set[asyncio.Task[None]] = set()
        self._client: httpx.AsyncClient | None = None

    async def migrate(self) -> None:
        await self._db.migrate(alerts_schema())

    def observe(self, use: BudgetUse) -> None:
        """Cheap on the hot path: claiming and sending run in the background, once per threshold and period."""
        for threshold in use.crossed(self._thresholds):
            key = (use.scope, use.subject, threshold)
            if self._announced.get(key) != use.period:
                self._announced[key] = use.period
                task = asyncio.create_task(self._claim_and_send(use, threshold))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Wait for the alerts in flight."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def close(self) -> None:
        await self.drain()
        if self._client is not None:
            await self._client.aclose()

    async def _claim_and_send(self, use: BudgetUse, threshold: int) -> None:
        params = (use.scope, use.subject, use.period, threshold, use.used, use.limit, self._clock())
        try:
            claimed = await self._db.execute(CLAIM, params) == 1
        except Exception:
            log.exception("could not record a budget alert; it will be tried again")
            self._announced.pop((use.scope, use.subject, threshold), None)
            return
        if claimed:
            log.warning("%s", use.message(threshold))
            if self._url:
                await self._post(self._url, use.payload(threshold))

    async def _post(self, url: str, body: dict[str, Any]) -> None:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self._timeout_s)
        try:
            response = await self._client.post(url, json=body)
            response.raise_for_status()
        except Exception as exc:  # an alert that cannot be delivered must not disturb the request
            # The URL itself can be the secret (Slack-style webhooks): name only its host and what went wrong.
            status = (
                exc.response.status_code if isinstance(exc, httpx.HTTPStatusError) else type(exc).__name__
            )
            log.error("the budget alert webhook at %s failed: %s", httpx.URL(url).host, status)
