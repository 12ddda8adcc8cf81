"""Identical cacheable requests in flight run the model once: the first leads, the others wait for its answer.

A leader that fails, is cancelled or ends without a cacheable answer abandons its key; its followers then
run the model themselves rather than share a failure.
"""

import asyncio
from typing import Generic, TypeVar

T = TypeVar("T")


class InFlight(Generic[T]):
    def __init__(self) -> None:
        self._answers: dict[str, asyncio.Future[T | None]] = {}

    def lead(self, key: str) -> bool:
        """Become the leader for `key`, unless another request already is."""
        if key in self._answers:
            return False
        self._answers[key] = asyncio.get_running_loop().create_future()
        return True

    async def wait_for(self, key: str, timeout_s: float | None = None) -> T | None:
        """The leader's answer, or None at once when nobody leads `key`, when the leader gave up, or when it has
        not answered within `timeout_s` (the follower then runs the model itself)."""
        answer = self._answers.get(key)
        if answer is None:
            return None
        try:
            return await asyncio.wait_for(asyncio.shield(answer), timeout_s)
        except TimeoutError:
            return None

    def resolve(self, key: str, value: T) -> None:
        self._settle(key, value)

    def abandon(self, key: str) -> None:
        self._settle(key, None)

    def _settle(self, key: str, value: T | None) -> None:
        answer = self._answers.pop(key, None)
        if answer is not None and not answer.done():
            answer.set_result(value)

    def __len__(self) -> int:
        return len(self._answers)
