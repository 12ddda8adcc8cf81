"""What the batch store keeps and hands out: batches, their items, and the claim a runner holds on one item."""

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class ItemState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"

    @property
    def terminal(self) -> bool:
        return self not in (ItemState.QUEUED, ItemState.RUNNING)


TERMINAL_STATES = frozenset(state for state in ItemState if state.terminal)


@dataclass(frozen=True)
class NewItem:
    body: dict[str, Any]
    external_reference: str | None = None


@dataclass(frozen=True)
class Batch:
    """`counts` holds every state (zero where no item is in it), read in one aggregate query."""

    id: str
    account_id: str
    token_id: str | None
    model: str
    shape: str  # "workers-ai" or "openai": which API submitted it and reads it back
    created_at: float
    expires_at: float
    cancelled_at: float | None
    metadata: dict[str, Any] = field(default_factory=dict)
    counts: dict[ItemState, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def done(self) -> int:
        return sum(self.counts.get(state, 0) for state in TERMINAL_STATES)

    @property
    def status(self) -> str:
        """An expired batch whose items are still running (started before its window closed) reads "running"
        until they finish, as a cancelled one reads "cancelling"."""
        if self.done == self.total:
            return self._finished_status()
        if self.cancelled_at is not None:
            return "cancelling"
        if self.counts.get(ItemState.QUEUED, 0) == self.total:
            return "queued"
        return "running"

    def _finished_status(self) -> str:
        if self.cancelled_at is not None:
            return "cancelled"
        if self.counts.get(ItemState.EXPIRED, 0) > 0:
            return "expired"
        return "completed"


@dataclass(frozen=True)
class BatchItem:
    batch_id: str
    position: int
    body: dict[str, Any]
    external_reference: str | None
    state: ItemState
    result: dict[str, Any] | None
    error: dict[str, Any] | None
    usage: dict[str, Any] | None
    attempts: int


@dataclass(frozen=True)
class Claim:
    """A runner's hold on one item until `until`. `item.attempts` tells this claim from a later one on the same
    item by the same holder, so a stale claim can never finish, renew or release a newer one."""

    batch: Batch
    item: BatchItem
    holder: str
    until: float
