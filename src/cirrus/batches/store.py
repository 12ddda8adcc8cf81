"""Batches of inference requests in the gateway's database, claimed item by item by runners in one or several
gateways sharing it.

Every change of an item's state is one conditional UPDATE, so two runners never both take or finish an item:
a claim takes an item that is queued, or running under a lease that lapsed (its runner died); `finish`, `renew`
and `release` act only while their claim still holds it (same holder and attempt, still running). A runner
whose `finish` answers False has lost the item to another and drops its result, so an item reaches a finished
state once. A batch's counts and status are read from its items in one query, never stored beside them.
"""

import json
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from typing import Any

from cirrus.batches.model import Batch, BatchItem, Claim, ItemState, NewItem
from cirrus.db.database import Database, Row

Clock = Callable[[], float]
Batches = list[Batch]
Items = list[BatchItem]
Rows = list[Row]
CLAIM_CANDIDATES = 16  # read per round; concurrent claimers race for the same first ones

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS batches (
        id TEXT PRIMARY KEY,
        account_id TEXT NOT NULL,
        token_id TEXT,
        model TEXT NOT NULL,
        shape TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL,
        cancelled_at DOUBLE PRECISION,
        metadata TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS batches_account ON batches (account_id, created_at, id)",
    # created_at is the batch's, copied so that claim order and the orphan purge need no join.
    """CREATE TABLE IF NOT EXISTS batch_items (
        batch_id TEXT NOT NULL,
        position INTEGER NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        body TEXT NOT NULL,
        external_reference TEXT,
        state TEXT NOT NULL,
        holder TEXT,
        held_until DOUBLE PRECISION,
        attempts INTEGER NOT NULL,
        result TEXT,
        error TEXT,
        usage TEXT,
        PRIMARY KEY (batch_id, position)
    )""",
    "CREATE INDEX IF NOT EXISTS batch_items_claim ON batch_items (state, created_at, batch_id, position)",
)

_BATCH_COLUMNS = (
    "b.id, b.account_id, b.token_id, b.model, b.shape, b.created_at, b.expires_at, b.cancelled_at, b.metadata"
)
_ITEM_COLUMNS = "batch_id, position, body, external_reference, state, result, error, usage, attempts"
_CLAIMABLE = "(state = 'queued' OR (state = 'running' AND held_until < ?))"
_HELD = "batch_id = ? AND position = ? AND holder = ? AND attempts = ? AND state = 'running'"
_ACTIVE_ITEMS = "SELECT 1 FROM batch_items WHERE batch_id = batches.id AND state IN ('queued', 'running')"


class BatchStore:
    """The database belongs to whoever opened it, so nothing here closes it."""

    def __init__(self, db: Database, clock: Clock = time.time) -> None:
        self._db = db
        self._clock = clock

    @classmethod
    async def open(cls, db: Database, clock: Clock = time.time) -> "BatchStore":
        await db.migrate(SCHEMA)
        return cls(db, clock)

    async def create(
        self,
        account_id: str,
        token_id: str | None,
        model: str,
        shape: str,
        items: Sequence[NewItem],
        window_s: float,
        metadata: dict[str, Any],
    ) -> Batch:
        """The items first, then the batch row, so a batch is never read with part of its items; a crash in
        between leaves orphan items, which `purge` removes."""
        if not items:
            raise ValueError("a batch needs at least one item")
        now = self._clock()
        batch_id = f"batch_{uuid.uuid4().hex}"
        await self._db.execute_many(
            "INSERT INTO batch_items (batch_id, position, created_at, body, external_reference, state, attempts)"
            " VALUES (?, ?, ?, ?, ?, 'queued', 0)",
            [(batch_id, n, now, json.dumps(i.body), i.external_reference) for n, i in enumerate(items)],
        )
        batch = Batch(
            batch_id,
            account_id,
            token_id,
            model,
            shape,
            now,
            now + window_s,
            None,
            metadata,
            _counts({ItemState.QUEUED: len(items)}),
        )
        await self._insert_batch(batch)
        return batch

    async def get(self, account_id: str, batch_id: str) -> Batch | None:
        """Another account's batch reads as absent."""
        found = await self._batches("id = ? AND account_id = ?", (batch_id, account_id))
        return found[0] if found else None

    async def list(self, account_id: str, limit: int, after: str | None = None) -> Batches:
        """Newest first; `after` is the id of the last batch of the previous page (an unknown one ends the list)."""
        if after is None:
            return await self._batches("account_id = ?", (account_id,), limit)
        cursor = "(created_at, id) < (SELECT created_at, id FROM batches WHERE id = ? AND account_id = ?)"
        return await self._batches(f"account_id = ? AND {cursor}", (account_id, after, account_id), limit)

    async def items(self, batch_id: str, after_position: int = -1, limit: int = 1000) -> Items:
        rows = await self._db.fetch_all(
            f"SELECT {_ITEM_COLUMNS} FROM batch_items WHERE batch_id = ? AND position > ?"
            " ORDER BY position LIMIT ?",
            (batch_id, after_position, limit),
        )
        return [_item(row) for row in rows]

    async def claim_next(
        self, holder: str, lease_s: float, models: Collection[str] | None = None
    ) -> Claim | None:
        """The oldest claimable item of a live batch (neither cancelled nor expired), of one of `models` (None:
        any). Candidates are read, then taken one by one with a conditional UPDATE: one another runner took in
        between changes no row, and the next is tried."""
        if models is not None and not models:
            return None
        while candidates := await self._claim_candidates(models):
            for batch_id, position in candidates:
                claim = await self._take(batch_id, position, holder, lease_s)
                if claim is not None:
                    return claim
        return None

    async def renew(self, claim: Claim, lease_s: float) -> Claim | None:
        """None if the claim was lost (its lease lapsed and another runner took the item, or it was settled)."""
        until = self._clock() + lease_s
        renewed = await self._db.execute(
            f"UPDATE batch_items SET held_until = ? WHERE {_HELD}", (until, *_held(claim))
        )
        return replace(claim, until=until) if renewed else None

    async def finish(
        self,
        claim: Claim,
        state: ItemState,
        result: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
        usage: dict[str, Any] | None = None,
    ) -> bool:
        """False: the claim was lost, another runner owns the item now, and this result must be dropped."""
        if not state.terminal:
            raise ValueError(f"an item finishes in a terminal state, not {state}")
        finished = await self._db.execute(
            "UPDATE batch_items SET state = ?, held_until = NULL, result = ?, error = ?, usage = ?"
            f" WHERE {_HELD}",
            (state.value, _json(result), _json(error), _json(usage), *_held(claim)),
        )
        return finished > 0

    async def release(self, claim: Claim) -> bool:
        """Back to queued (preempted, or its gateway is stopping); its attempt stays counted. In a batch
        cancelled meanwhile it is cancelled instead, as `cancel` would have done had it been queued then."""
        released = await self._db.execute(
            f"UPDATE batch_items SET state = 'queued', holder = NULL, held_until = NULL WHERE {_HELD}",
            _held(claim),
        )
        if released:
            await self._db.execute(
                "UPDATE batch_items SET state = 'cancelled' WHERE batch_id = ? AND position = ?"
                " AND state = 'queued' AND EXISTS"
                " (SELECT 1 FROM batches WHERE id = ? AND cancelled_at IS NOT NULL)",
                (claim.item.batch_id, claim.item.position, claim.item.batch_id),
            )
        return released > 0

    async def cancel(self, account_id: str, batch_id: str) -> Batch | None:
        """Queued items are cancelled; running ones finish (their runner's `finish` still succeeds), the batch
        reading "cancelling" until they have. A batch whose items are all finished is left as it is."""
        await self._db.execute(
            f"UPDATE batches SET cancelled_at = ? WHERE id = ? AND account_id = ? AND cancelled_at IS NULL"
            f" AND EXISTS ({_ACTIVE_ITEMS})",
            (self._clock(), batch_id, account_id),
        )
        await self._db.execute(
            "UPDATE batch_items SET state = 'cancelled' WHERE batch_id = ? AND state = 'queued'"
            " AND EXISTS (SELECT 1 FROM batches WHERE id = ? AND account_id = ? AND cancelled_at IS NOT NULL)",
            (batch_id, batch_id, account_id),
        )
        return await self.get(account_id, batch_id)

    async def expire(self) -> int:
        """The periodic sweep: items of batches past their window that nobody holds (queued, or running under a
        lapsed lease) become expired; those of cancelled batches, cancelled (a runner that died holding one, or
        an item released after the cancel). Returns how many items it settled."""
        now = self._clock()
        cancelled = await self._settle_unheld(ItemState.CANCELLED, "cancelled_at IS NOT NULL", (now,))
        expired = await self._settle_unheld(
            ItemState.EXPIRED, "cancelled_at IS NULL AND expires_at <= ?", (now, now)
        )
        return cancelled + expired

    async def queued_items(self, account_id: str) -> int:
        """Items not yet finished (queued or running) across the account's batches."""
        row = await self._db.fetch_one(
            "SELECT COUNT(*) FROM batch_items i JOIN batches b ON b.id = i.batch_id"
            " WHERE b.account_id = ? AND i.state IN ('queued', 'running')",
            (account_id,),
        )
        return int(row[0]) if row else 0

    async def purge(self, older_than_s: float) -> int:
        """Finished batches created before `older_than_s` ago, with their items, and items that lost their batch
        row (a create that crashed halfway) that old, so that a create in progress keeps its items. The batch
        rows go first: a crash in between leaves orphan items, which the next purge takes. Returns how many
        batches."""
        cutoff = self._clock() - older_than_s
        purged = await self._db.execute(
            f"DELETE FROM batches WHERE created_at < ? AND NOT EXISTS ({_ACTIVE_ITEMS})", (cutoff,)
        )
        await self._db.execute(
            "DELETE FROM batch_items WHERE created_at < ?"
            " AND NOT EXISTS (SELECT 1 FROM batches WHERE batches.id = batch_items.batch_id)",
            (cutoff,),
        )
        return purged

    async def _insert_batch(self, batch: Batch) -> None:
        await self._db.execute(
            "INSERT INTO batches (id, account_id, token_id, model, shape, created_at, expires_at, metadata)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                batch.id,
                batch.account_id,
                batch.token_id,
                batch.model,
                batch.shape,
                batch.created_at,
                batch.expires_at,
                json.dumps(batch.metadata),
            ),
        )

    async def _settle_unheld(self, state: ItemState, batches: str, params: tuple[Any, ...]) -> int:
        """Items nobody holds (queued, or running under a lapsed lease) of the batches `batches` selects."""
        return await self._db.execute(
            f"UPDATE batch_items SET state = ?, held_until = NULL WHERE {_CLAIMABLE}"
            f" AND batch_id IN (SELECT id FROM batches WHERE {batches})",
            (state.value, *params),
        )

    async def _claim_candidates(self, models: Collection[str] | None) -> Rows:
        now = self._clock()
        models_sql = "" if models is None else f" AND b.model IN ({', '.join('?' * len(models))})"
        return await self._db.fetch_all(
            f"SELECT i.batch_id, i.position FROM batch_items i JOIN batches b ON b.id = i.batch_id"
            f" WHERE {_CLAIMABLE} AND b.cancelled_at IS NULL AND b.expires_at > ?{models_sql}"
            " ORDER BY i.created_at, i.batch_id, i.position LIMIT ?",
            (now, now, *(models or ()), CLAIM_CANDIDATES),
        )

    async def _take(self, batch_id: str, position: int, holder: str, lease_s: float) -> Claim | None:
        now = self._clock()
        taken = await self._db.execute(
            "UPDATE batch_items SET state = 'running', holder = ?, held_until = ?, attempts = attempts + 1"
            f" WHERE batch_id = ? AND position = ? AND {_CLAIMABLE}",
            (holder, now + lease_s, batch_id, position, now),
        )
        if not taken:
            return None
        item = await self._db.fetch_one(
            f"SELECT {_ITEM_COLUMNS} FROM batch_items WHERE batch_id = ? AND position = ?",
            (batch_id, position),
        )
        batch = await self._batches("id = ?", (batch_id,))
        if item is None or not batch:  # purged meanwhile: not a claimable item's fate, but never a crash
            return None
        return Claim(batch[0], _item(item), holder, now + lease_s)

    async def _batches(self, where: str, params: tuple[Any, ...], limit: int | None = None) -> Batches:
        """Batches with their counts by state, newest first, in one statement: the counts are one snapshot."""
        page = "" if limit is None else " LIMIT ?"
        rows = await self._db.fetch_all(
            f"SELECT {_BATCH_COLUMNS}, i.state, COUNT(i.position) FROM"
            f" (SELECT * FROM batches WHERE {where} ORDER BY created_at DESC, id DESC{page}) b"
            f" LEFT JOIN batch_items i ON i.batch_id = b.id GROUP BY {_BATCH_COLUMNS}, i.state"
            " ORDER BY b.created_at DESC, b.id DESC",
            params if limit is None else (*params, limit),
        )
        return _fold_batches(rows)


def _fold_batches(rows: Rows) -> Batches:
    """One row per batch and item state, in batch order, into batches."""
    counts: dict[str, dict[ItemState, int]] = {}
    heads: dict[str, Row] = {}
    for row in rows:
        heads.setdefault(row[0], row)
        if row[9] is not None:
            counts.setdefault(row[0], {})[ItemState(row[9])] = int(row[10])
    return [_batch(head, _counts(counts.get(batch_id, {}))) for batch_id, head in heads.items()]


def _batch(row: Row, counts: dict[ItemState, int]) -> Batch:
    metadata = json.loads(row[8])
    return Batch(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], metadata, counts)


def _item(row: Row) -> BatchItem:
    result, error, usage = (_parsed(text) for text in row[5:8])
    return BatchItem(
        row[0], row[1], json.loads(row[2]), row[3], ItemState(row[4]), result, error, usage, row[8]
    )


def _counts(found: dict[ItemState, int]) -> dict[ItemState, int]:
    return {state: found.get(state, 0) for state in ItemState}


def _held(claim: Claim) -> tuple[Any, ...]:
    return (claim.item.batch_id, claim.item.position, claim.holder, claim.item.attempts)


def _parsed(text: str | None) -> dict[str, Any] | None:
    return None if text is None else json.loads(text)


def _json(value: dict[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value)
