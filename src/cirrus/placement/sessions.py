"""Which node served a session-affinity key last, for a bounded number of keys (least recently used forgotten)."""

from collections import OrderedDict


class SessionTable:
    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._nodes: OrderedDict[str, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._nodes)

    def get(self, key: str) -> str | None:
        node_id = self._nodes.get(key)
        if node_id is not None:
            self._nodes.move_to_end(key)
        return node_id

    def remember(self, key: str, node_id: str) -> None:
        self._nodes[key] = node_id
        self._nodes.move_to_end(key)
        while len(self._nodes) > self._capacity:
            self._nodes.popitem(last=False)
