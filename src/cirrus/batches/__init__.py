"""Batches of inference requests (Workers AI's `queueRequest`, OpenAI's Batch API), kept durably in the gateway's
database and run item by item by background runners."""

from cirrus.batches.model import TERMINAL_STATES, Batch, BatchItem, Claim, ItemState, NewItem
from cirrus.batches.store import BatchStore

__all__ = ["TERMINAL_STATES", "Batch", "BatchItem", "BatchStore", "Claim", "ItemState", "NewItem"]
