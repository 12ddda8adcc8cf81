"""AI Search's instances, their items (uploaded files, content included) and ingest jobs, in the gateway's
database, so gateways sharing a PostgreSQL share them; items are claimed one by one by ingest runners.

Per account: another account's instance reads as absent, and everything below an instance is reached through
the `Instance` the account's lookup returned. An item is keyed by its file name in the instance: uploading a
name again with the same bytes changes nothing (unless it failed before), with other bytes queues the item again
under the same id, its old chunks searchable until the new ones replace them.

Claims work as in cirrus/batches/store.py: one conditional UPDATE per change of state, a lease that lapses when
its runner dies, and an attempt number that only grows, so only the current claim can renew, finish or release
its item. An item claimed `max_tries` times since its upload whose last lease lapsed (its runner died) is
given up as an error rather than claimed again.
"""

import hashlib
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from cirrus.db.database import Database, Row
from cirrus.errors import InvalidInput, NotFound
from cirrus.rag.index import ChunkIndex
from cirrus.rag.instance_settings import check_id, checked_settings, settings_with_defaults
from cirrus.rag.model import Claim, Instance, Item, ItemState, JobStatus
from cirrus.rag.opening import open_index

Clock = Callable[[], float]
Files = Sequence[tuple[str, bytes]]
CLAIM_CANDIDATES = 16  # read per round; concurrent claimers race for the same first ones
KEYS_PER_QUERY = 500
MAX_ERROR_CHARS = 2000
DEFAULT_MAX_INSTANCES = 20
DEFAULT_MAX_ITEMS = 10_000
DEFAULT_MAX_TRIES = 3


def _schema(dialect: str) -> tuple[str, ...]:
    blob = "BYTEA" if dialect == "postgresql" else "BLOB"
    return (
        """CREATE TABLE IF NOT EXISTS rag_instances (
            uid TEXT PRIMARY KEY,
            account_id TEXT NOT NULL,
            id TEXT NOT NULL,
            embedding_model TEXT NOT NULL,
            chat_model TEXT NOT NULL,
            chunk_size INTEGER NOT NULL,
            chunk_overlap INTEGER NOT NULL,
            hybrid INTEGER NOT NULL,
            max_num_results INTEGER NOT NULL,
            score_threshold DOUBLE PRECISION NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            modified_at DOUBLE PRECISION NOT NULL,
            UNIQUE (account_id, id)
        )""",
        # attempt: claims ever taken (a claim's identity); tries: claims since an upload last queued it
        f"""CREATE TABLE IF NOT EXISTS rag_items (
            id TEXT PRIMARY KEY,
            instance_uid TEXT NOT NULL,
            account_id TEXT NOT NULL,
            key TEXT NOT NULL,
            content_hash TEXT NOT NULL,
            size BIGINT NOT NULL,
            state TEXT NOT NULL,
            chunks INTEGER NOT NULL,
            error TEXT,
            job_id TEXT NOT NULL,
            token_id TEXT,
            holder TEXT,
            held_until DOUBLE PRECISION,
            attempt INTEGER NOT NULL,
            tries INTEGER NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            modified_at DOUBLE PRECISION NOT NULL,
            content {blob} NOT NULL,
            UNIQUE (instance_uid, key)
        )""",
        "CREATE INDEX IF NOT EXISTS rag_items_claim ON rag_items (state, modified_at, id)",
        "CREATE INDEX IF NOT EXISTS rag_items_job ON rag_items (job_id)",
        """CREATE TABLE IF NOT EXISTS rag_jobs (
            id TEXT PRIMARY KEY,
            instance_uid TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS rag_jobs_instance ON rag_jobs (instance_uid)",
    )


_SETTINGS = (
    "embedding_model",
    "chat_model",
    "chunk_size",
    "chunk_overlap",
    "hybrid",
    "max_num_results",
    "score_threshold",
)
_INSTANCE_COLUMNS = f"uid, id, account_id, {', '.join(_SETTINGS)}, created_at, modified_at"
_ITEM_COLUMNS = (
    "id, instance_uid, account_id, key, content_hash, size, state, chunks, error, job_id, created_at,"
    " modified_at, token_id"
)
_HELD = "id = ? AND holder = ? AND attempt = ? AND state = 'running'"
_UPLOAD = (
    "INSERT INTO rag_items (id, instance_uid, account_id, key, content_hash, size, state, chunks, job_id,"
    " token_id, attempt, tries, created_at, modified_at, content)"
    " VALUES (?, ?, ?, ?, ?, ?, 'queued', 0, ?, ?, 0, 0, ?, ?, ?)"
    " ON CONFLICT (instance_uid, key) DO UPDATE SET content_hash = excluded.content_hash,"
    " size = excluded.size, content = excluded.content, state = 'queued', error = NULL,"
    " job_id = excluded.job_id, token_id = excluded.token_id, holder = NULL, held_until = NULL, tries = 0, modified_at = excluded.modified_at"
    " WHERE rag_items.content_hash <> excluded.content_hash OR rag_items.state = 'error'"
)


class RagStore:
    """The database belongs to whoever opened it, so nothing here closes it. `index` is the chunk index in the
    same database: deleting an item or an instance removes its chunks there too."""

    def __init__(
        self,
        db: Database,
        index: ChunkIndex,
        clock: Clock = time.time,
        *,
        max_instances: int = DEFAULT_MAX_INSTANCES,
        max_items: int = DEFAULT_MAX_ITEMS,
        max_tries: int = DEFAULT_MAX_TRIES,
    ) -> None:
        self._db = db
        self.index = index
        self._clock = clock
        self._max_instances = max_instances
        self._max_items = max_items
        self._max_tries = max_tries

    @classmethod
    async def open(
        cls,
        db: Database,
        clock: Clock = time.time,
        *,
        index: ChunkIndex | None = None,
        max_instances: int = DEFAULT_MAX_INSTANCES,
        max_items: int = DEFAULT_MAX_ITEMS,
        max_tries: int = DEFAULT_MAX_TRIES,
    ) -> "RagStore":
        """With the database's own index (`open_index`) unless one is given."""
        await db.migrate(_schema(db.dialect))
        index = index if index is not None else await open_index(db)
        return cls(db, index, clock, max_instances=max_instances, max_items=max_items, max_tries=max_tries)

    # Instances

    async def create_instance(self, account_id: str, id: str, **settings: Any) -> Instance:
        """InvalidInput for a bad id or setting, an id the account already has, or past `max_instances`."""
        values = settings_with_defaults(settings)
        now = self._clock()
        instance = Instance(
            uuid.uuid4().hex, check_id(id), account_id, **values, created_at=now, modified_at=now
        )
        # One statement checks the limit and the id, so two creates at once cannot both pass on the id.
        created = await self._db.execute(
            f"INSERT INTO rag_instances ({_INSTANCE_COLUMNS})"
            f" SELECT {', '.join('?' * 12)} WHERE (SELECT COUNT(*) FROM rag_instances WHERE account_id = ?) < ?"
            " ON CONFLICT (account_id, id) DO NOTHING",
            (*_instance_values(instance), account_id, self._max_instances),
        )
        if created:
            return instance
        if await self.instance(account_id, id) is not None:
            raise InvalidInput(f"this account already has an AI Search instance '{id}'", param="id")
        raise InvalidInput(
            f"an account may have at most {self._max_instances} AI Search instances; delete one first"
        )

    async def instance(self, account_id: str, id: str) -> Instance | None:
        found = await self._instances("account_id = ? AND id = ?", (account_id, id))
        return found[0] if found else None

    async def instance_by_uid(self, uid: str) -> Instance | None:
        """For ingest runners, which find an item's instance by the uid it is stored under."""
        found = await self._instances("uid = ?", (uid,))
        return found[0] if found else None

    async def instances(self, account_id: str) -> list[Instance]:
        """Oldest first."""
        return await self._instances("account_id = ?", (account_id,))

    async def update_instance(self, account_id: str, id: str, **settings: Any) -> Instance | None:
        """The settings given change; None if the account has no such instance. The embedding model changes only
        while the instance has no items: its vectors come from one model."""
        changes = checked_settings(settings)
        current = await self.instance(account_id, id)
        if current is None or not changes:
            return current
        model = changes.get("embedding_model", current.embedding_model)
        if model != current.embedding_model and await self._item_count(current.uid) > 0:
            raise InvalidInput(
                "the embedding model of an instance with items cannot change; create another instance",
                param="embedding_model",
            )
        assignments = ", ".join(f"{name} = ?" for name in changes)
        values = [int(value) if isinstance(value, bool) else value for value in changes.values()]
        await self._db.execute(
            f"UPDATE rag_instances SET {assignments}, modified_at = ? WHERE uid = ?",
            (*values, self._clock(), current.uid),
        )
        return await self.instance(account_id, id)

    async def delete_instance(self, account_id: str, id: str) -> bool:
        """The instance row goes first, so nothing finds it (nor claims its items) once this starts."""
        instance = await self.instance(account_id, id)
        if instance is None:
            return False
        deleted = await self._db.execute("DELETE FROM rag_instances WHERE uid = ?", (instance.uid,))
        if not deleted:
            return False  # deleted by someone else meanwhile
        await self.index.drop_instance(instance.uid)
        await self._db.execute("DELETE FROM rag_items WHERE instance_uid = ?", (instance.uid,))
        await self._db.execute("DELETE FROM rag_jobs WHERE instance_uid = ?", (instance.uid,))
        return True

    # Items and jobs

    async def add_items(
        self, instance: Instance, files: Files, token_id: str | None = None
    ) -> tuple[str, list[Item]]:
        """One job for the upload, by the token `token_id`; the items in the order of `files`, unchanged ones as
        they were. Each file is its own statement: a large upload never holds the database in one long call."""
        keys = [key for key, _ in files]
        _check_keys(keys)
        await self._check_room(instance, keys)
        job_id = uuid.uuid4().hex
        now = self._clock()
        await self._db.execute(
            "INSERT INTO rag_jobs (id, instance_uid, created_at) VALUES (?, ?, ?)",
            (job_id, instance.uid, now),
        )
        for key, data in files:
            digest = hashlib.sha256(data).hexdigest()
            await self._db.execute(
                _UPLOAD,
                (
                    uuid.uuid4().hex,
                    instance.uid,
                    instance.account_id,
                    key,
                    digest,
                    len(data),
                    job_id,
                    token_id,
                    now,
                    now,
                    data,
                ),
            )
        by_key = {item.key: item for item in await self._items_by_key(instance, keys)}
        return job_id, [by_key[key] for key in keys if key in by_key]

    async def items(
        self,
        instance: Instance,
        state: ItemState | None = None,
        limit: int = 1000,
        after_key: str | None = None,
    ) -> list[Item]:
        """By key; `after_key` is the last key of the previous page."""
        where = "instance_uid = ?"
        params: list[Any] = [instance.uid]
        if state is not None:
            where += " AND state = ?"
            params.append(state.value)
        if after_key is not None:
            where += " AND key > ?"
            params.append(after_key)
        rows = await self._db.fetch_all(
            f"SELECT {_ITEM_COLUMNS} FROM rag_items WHERE {where} ORDER BY key LIMIT ?", (*params, limit)
        )
        return [_item(row) for row in rows]

    async def item(self, instance: Instance, item_id: str) -> Item | None:
        row = await self._db.fetch_one(
            f"SELECT {_ITEM_COLUMNS} FROM rag_items WHERE id = ? AND instance_uid = ?",
            (item_id, instance.uid),
        )
        return None if row is None else _item(row)

    async def delete_item(self, instance: Instance, item_id: str) -> bool:
        """The item and its chunks. A runner indexing it meanwhile cannot complete it, and `complete` removes
        the chunks that runner wrote."""
        deleted = await self._db.execute(
            "DELETE FROM rag_items WHERE id = ? AND instance_uid = ?", (item_id, instance.uid)
        )
        if deleted:
            await self.index.delete_item(instance.uid, item_id)
        return deleted > 0

    async def content(self, item: Item) -> bytes:
        """The item's bytes as uploaded (the latest upload, if it was uploaded again since `item` was read);
        NotFound once it is deleted."""
        row = await self._db.fetch_one("SELECT content FROM rag_items WHERE id = ?", (item.id,))
        if row is None:
            raise NotFound(f"the item '{item.key}' was deleted")
        return bytes(row[0])

    async def job(self, instance: Instance, job_id: str) -> JobStatus | None:
        """Its items' counts by state, in one statement: one snapshot."""
        rows = await self._db.fetch_all(
            "SELECT j.created_at, i.state, COUNT(i.id), MAX(i.modified_at) FROM rag_jobs j"
            " LEFT JOIN rag_items i ON i.job_id = j.id AND i.instance_uid = j.instance_uid"
            " WHERE j.id = ? AND j.instance_uid = ? GROUP BY j.created_at, i.state",
            (job_id, instance.uid),
        )
        return _job(job_id, instance.uid, rows) if rows else None

    # Claims

    async def claim_next(self, holder: str, lease_s: float) -> Claim | None:
        """The item queued longest (or running under a lapsed lease) of a live instance. Candidates are read,
        then taken one by one with a conditional UPDATE: one another runner took in between changes no row."""
        await self._give_up_lapsed()
        while candidates := await self._claim_candidates():
            for (item_id,) in candidates:
                claim = await self._take(item_id, holder, lease_s)
                if claim is not None:
                    return claim
        return None

    async def renew(self, claim: Claim, lease_s: float) -> bool:
        """False: the claim was lost (its lease lapsed and another runner took the item, or the file was
        uploaded again or deleted)."""
        renewed = await self._db.execute(
            f"UPDATE rag_items SET held_until = ? WHERE {_HELD}", (self._clock() + lease_s, *_held(claim))
        )
        return renewed > 0

    async def complete(self, claim: Claim, chunks: int) -> bool:
        """False: the claim was lost and the item is someone else's now. Where it was lost to a delete, the
        chunks its runner wrote since are removed here."""
        completed = await self._settle(claim, "state = 'completed', chunks = ?, error = NULL", (chunks,))
        if not completed and await self._gone(claim.item.id):
            await self.index.delete_item(claim.item.instance_uid, claim.item.id)
        return completed

    async def fail(self, claim: Claim, message: str) -> bool:
        """The item in error with `message`; whatever it had indexed before stays searchable."""
        return await self._settle(claim, "state = 'error', error = ?", (message[:MAX_ERROR_CHARS],))

    async def release(self, claim: Claim) -> bool:
        """Back to the end of the queue (a transient failure, or its gateway stopping); its try stays counted."""
        return await self._settle(claim, "state = 'queued'", ())

    async def _settle(self, claim: Claim, assignments: str, params: tuple[Any, ...]) -> bool:
        settled = await self._db.execute(
            f"UPDATE rag_items SET {assignments}, holder = NULL, held_until = NULL, modified_at = ? WHERE {_HELD}",
            (*params, self._clock(), *_held(claim)),
        )
        return settled > 0

    async def _give_up_lapsed(self) -> None:
        now = self._clock()
        await self._db.execute(
            "UPDATE rag_items SET state = 'error', error = ?, holder = NULL, held_until = NULL, modified_at = ?"
            " WHERE state = 'running' AND held_until < ? AND tries >= ?",
            (
                f"indexing stopped unfinished {self._max_tries} times (its gateway stopped or ran out of time)",
                now,
                now,
                self._max_tries,
            ),
        )

    async def _claim_candidates(self) -> list[Row]:
        return await self._db.fetch_all(
            "SELECT id FROM rag_items WHERE (state = 'queued' OR (state = 'running' AND held_until < ?))"
            " AND EXISTS (SELECT 1 FROM rag_instances WHERE rag_instances.uid = rag_items.instance_uid)"
            " ORDER BY modified_at, id LIMIT ?",
            (self._clock(), CLAIM_CANDIDATES),
        )

    async def _take(self, item_id: str, holder: str, lease_s: float) -> Claim | None:
        now = self._clock()
        taken = await self._db.execute(
            "UPDATE rag_items SET state = 'running', holder = ?, held_until = ?, attempt = attempt + 1,"
            " tries = tries + 1, modified_at = ?"
            " WHERE id = ? AND (state = 'queued' OR (state = 'running' AND held_until < ?))",
            (holder, now + lease_s, now, item_id, now),
        )
        if not taken:
            return None
        row = await self._db.fetch_one(
            f"SELECT {_ITEM_COLUMNS}, attempt, tries FROM rag_items WHERE id = ? AND holder = ?",
            (item_id, holder),
        )
        return None if row is None else Claim(_item(row), holder, int(row[13]), int(row[14]))

    async def _gone(self, item_id: str) -> bool:
        return await self._db.fetch_one("SELECT 1 FROM rag_items WHERE id = ?", (item_id,)) is None

    async def _check_room(self, instance: Instance, keys: list[str]) -> None:
        """Past `max_items`, the upload is refused whole (files already there do not count twice)."""
        existing = {item.key for item in await self._items_by_key(instance, keys)}
        new = len(set(keys) - existing)
        if new and await self._item_count(instance.uid) + new > self._max_items:
            raise InvalidInput(
                f"an AI Search instance holds at most {self._max_items} files; this upload adds {new}"
            )

    async def _item_count(self, instance_uid: str) -> int:
        row = await self._db.fetch_one(
            "SELECT COUNT(*) FROM rag_items WHERE instance_uid = ?", (instance_uid,)
        )
        return int(row[0]) if row else 0

    async def _items_by_key(self, instance: Instance, keys: list[str]) -> list[Item]:
        found: list[Item] = []
        for start in range(0, len(keys), KEYS_PER_QUERY):
            batch = keys[start : start + KEYS_PER_QUERY]
            rows = await self._db.fetch_all(
                f"SELECT {_ITEM_COLUMNS} FROM rag_items WHERE instance_uid = ?"
                f" AND key IN ({', '.join('?' * len(batch))})",
                (instance.uid, *batch),
            )
            found += [_item(row) for row in rows]
        return found

    async def _instances(self, where: str, params: tuple[Any, ...]) -> list[Instance]:
        rows = await self._db.fetch_all(
            f"SELECT {_INSTANCE_COLUMNS} FROM rag_instances WHERE {where} ORDER BY created_at, id", params
        )
        return [_instance(row) for row in rows]


def _check_keys(keys: list[str]) -> None:
    if not keys:
        raise InvalidInput("an upload needs at least one file", param="file")
    if any(not key or not key.strip() for key in keys):
        raise InvalidInput("every file needs a name", param="file")
    if len(set(keys)) != len(keys):
        duplicate = next(key for key in keys if keys.count(key) > 1)
        raise InvalidInput(f"the upload names '{duplicate}' more than once", param="file")


def _instance_values(instance: Instance) -> tuple[Any, ...]:
    """In `_INSTANCE_COLUMNS`' order."""
    return (
        instance.uid,
        instance.id,
        instance.account_id,
        instance.embedding_model,
        instance.chat_model,
        instance.chunk_size,
        instance.chunk_overlap,
        int(instance.hybrid),
        instance.max_num_results,
        instance.score_threshold,
        instance.created_at,
        instance.modified_at,
    )


def _instance(row: Row) -> Instance:
    return Instance(
        str(row[0]),
        str(row[1]),
        str(row[2]),
        str(row[3]),
        str(row[4]),
        int(row[5]),
        int(row[6]),
        bool(row[7]),
        int(row[8]),
        float(row[9]),
        float(row[10]),
        float(row[11]),
    )


def _item(row: Row) -> Item:
    return Item(
        str(row[0]),
        str(row[1]),
        str(row[2]),
        str(row[3]),
        str(row[4]),
        int(row[5]),
        ItemState(row[6]),
        int(row[7]),
        None if row[8] is None else str(row[8]),
        str(row[9]),
        float(row[10]),
        float(row[11]),
        None if row[12] is None else str(row[12]),
    )


def _job(job_id: str, instance_uid: str, rows: list[Row]) -> JobStatus:
    """Rows of (job created_at, item state or NULL, count, latest item change)."""
    counts = {ItemState(row[1]): int(row[2]) for row in rows if row[1] is not None}
    created_at = float(rows[0][0])
    settled = [float(row[3]) for row in rows if row[3] is not None]
    active = counts.get(ItemState.QUEUED, 0) + counts.get(ItemState.RUNNING, 0)
    return JobStatus(
        job_id,
        instance_uid,
        created_at,
        None if active else max([created_at, *settled]),
        counts.get(ItemState.QUEUED, 0),
        counts.get(ItemState.RUNNING, 0),
        counts.get(ItemState.COMPLETED, 0),
        counts.get(ItemState.ERROR, 0),
    )


def _held(claim: Claim) -> tuple[Any, ...]:
    return (claim.item.id, claim.holder, claim.attempt)
