"""What the Overview page shows, as one JSON-ready dict: health, node status, the last hour's traffic and TTFT.

An admin sees the whole node and every account's traffic; any other principal its own account's traffic and
the node's health, not its instances (the operator routes are admin-only too).
"""

import time
from collections.abc import Callable
from typing import Any

from cirrus.auth import Permission, Principal
from cirrus.console.read_models.latency import TtftWindow, ttft_buckets
from cirrus.console.read_models.node_status import node_status
from cirrus.console.read_models.traffic import last_hour
from cirrus.platform import Platform


class OverviewReader:
    def __init__(self, platform: Platform, clock: Callable[[], float] = time.time) -> None:
        self._platform = platform
        self._clock = clock
        self._ttft = TtftWindow(lambda: ttft_buckets(platform.metrics.registry), clock())

    async def read(self, principal: Principal) -> dict[str, Any]:
        now = self._clock()
        admin = principal.can(Permission.ADMIN)
        status = node_status(self._platform)
        traffic = await last_hour(self._platform.gateway.db, now, None if admin else principal.account_id)
        overview: dict[str, Any] = {
            "health": {"live": True, "ready": status.ready, "installed_models": status.installed_models},
            "scope": "node" if admin else "account",
            "traffic": traffic.to_json(),
            "node": None,
            "ttft": None,
        }
        if admin:
            ttft = self._ttft.percentiles(now)
            overview["node"] = status.to_json()
            overview["ttft"] = {
                "window_s": ttft.window_s,
                "samples": ttft.samples,
                "p50_s": ttft.p50_s,
                "p99_s": ttft.p99_s,
            }
        return overview
