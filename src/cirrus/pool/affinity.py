"""What served a session last (the `x-session-affinity` header): an instance in a pool, a node in a cluster;
remembered for a bounded number of keys, the least recently used forgotten first. No other import, so the pure
placement package can use it too."""

from collections import OrderedDict

MAX_SESSIONS = 10_000


class AffinityTable:
    def __init__(self, capacity: int = MAX_SESSIONS) -> None:
        self._capacity = capacity
        self._served: OrderedDict[str, str] = OrderedDict()

    def get(self, key: str) -> str | None:
        served = self._served.get(key)
        if served is not None:
            self._served.move_to_end(key)
        return served

    def remember(self, key: str, served_by: str) -> None:
        self._served[key] = served_by
        self._served.move_to_end(key)
        while len(self._served) > self._capacity:
            self._served.popitem(last=False)
