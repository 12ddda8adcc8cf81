"""Amounts metered but not yet in the store, per (subject, period), so budget checks can count them.

Each key also counts the writes that settled it: a reader that cached a stored total knows the cache is stale
as soon as this process has written more to that key since the read.
"""

Key = tuple[str, str]  # (subject, period): (account id, day) or (token id, month)


class Ledger:
    def __init__(self) -> None:
        self._pending: dict[Key, float] = {}
        self._settled: dict[Key, int] = {}

    def add(self, key: Key, amount: float) -> None:
        self._pending[key] = self._pending.get(key, 0.0) + amount

    def settle(self, key: Key, amount: float) -> None:
        """The amount is in the store now."""
        if key in self._pending:
            self._pending[key] -= amount
        self._settled[key] = self._settled.get(key, 0) + 1

    def pending(self, key: Key) -> float:
        return max(0.0, self._pending.get(key, 0.0))

    def version(self, key: Key) -> int:
        return self._settled.get(key, 0)

    def drop_before(self, period: str) -> None:
        """Forget past periods: checks only ever ask about the current one."""
        for table in (self._pending, self._settled):
            for key in [k for k in table if k[1] < period]:
                del table[key]
