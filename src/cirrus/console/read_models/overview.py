"""What the Overview page shows, as one JSON-ready dict: health, node status, the last hour's traffic and TTFT.

An admin sees the whole node and every account's traffic and TTFT; any other principal its own account's, and
the node's health, not its instances (the operator routes are admin-only too).
"""

import time
from collections.abc import Callable
from typing import Any

from cirrus.auth import Permission, Principal
from cirrus.console.read_models.latency import ttft_last_hour
from cirrus.console.read_models.node_status import node_status
from cirrus.console.read_models.traffic import last_hour
from cirrus.platform import Platform


class OverviewReader:
    def __init__(self, platform: Platform, clock: Callable[[], float] = time.time) -> None:
        self._platform = platform
        self._clock = clock

    async def read(self, principal: Principal) -> dict[str, Any]:
        now = self._clock()
        admin = principal.can(Permission.ADMIN)
        status = node_status(self._platform)
        db, account = self._platform.gateway.db, None if admin else principal.account_id
        traffic = await last_hour(db, now, account)
        ttft = await ttft_last_hour(db, now, account)
        return {
            "health": {"live": True, "ready": status.ready, "installed_models": status.installed_models},
            "scope": "node" if admin else "account",
            "traffic": traffic.to_json(),
            "ttft": ttft.to_json(),
            "node": status.to_json() if admin else None,
        }
