"""Which instance served a session last (the `x-session-affinity` header), remembered for a bounded number."""

from collections import OrderedDict

MAX_SESSIONS = 10_000


class AffinityTable:
    def __init__(self, capacity: int = MAX_SESSIONS) -> None:
        self._capacity = capacity
        self._instances: OrderedDict[str, str] = OrderedDict()

    def get(self, key: str) -> str | None:
        instance = self._instances.get(key)
        if instance is not None:
            self._instances.move_to_end(key)
        return instance

    def remember(self, key: str, instance_id: str) -> None:
        self._instances[key] = instance_id
        self._instances.move_to_end(key)
        while len(self._instances) > self._capacity:
            self._instances.popitem(last=False)
