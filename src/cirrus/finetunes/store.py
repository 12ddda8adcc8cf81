"""Fine-tunes in the gateway's database (SQLite on one machine, PostgreSQL where several gateways share it), per
account: another account's finetune reads as absent, by id and by name alike.

A finetune's name is unique within its account, and an account holds at most `limit` of them: one conditional
INSERT checks both. On SQLite the INSERT holds the database's write lock from before it counts. On PostgreSQL a
statement counts what was committed when it began, so two gateways creating at once could each count room for one
more: there the count is `finetunes_room`, a function that first takes a lock per account (held until the INSERT
commits), then counts in a snapshot of its own taken after the lock, as a volatile function's statements do.

Its assets are recorded by digest as they are uploaded; it becomes ready once the adapter converted from them is
recorded, and only if its assets are still the ones it was converted from.
"""

import time
import uuid
from collections.abc import Callable
from typing import Any

from cirrus.db.database import Database, Row
from cirrus.errors import InvalidInput
from cirrus.finetunes.errors import FinetuneAssetsMissing
from cirrus.finetunes.model import Adapter, Asset, Finetune

Clock = Callable[[], float]
Finetunes = list[Finetune]

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS finetunes (
        id TEXT PRIMARY KEY,
        account_id TEXT NOT NULL,
        name TEXT NOT NULL,
        description TEXT,
        model TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        modified_at DOUBLE PRECISION NOT NULL,
        config_digest TEXT,
        weights_digest TEXT,
        adapter_digest TEXT,
        adapter_path TEXT,
        UNIQUE (account_id, name)
    )""",
    "CREATE INDEX IF NOT EXISTS finetunes_account ON finetunes (account_id, created_at, id)",
)
_ROOM_LOCK_CLASS = 0x66746E73  # "ftns": advisory locks keyed (this class, the account's hash) are the store's
POSTGRES_ROOM = f"""
CREATE OR REPLACE FUNCTION finetunes_room(room_account TEXT, most BIGINT) RETURNS BOOLEAN
LANGUAGE plpgsql VOLATILE AS $room$
BEGIN
    PERFORM pg_advisory_xact_lock({_ROOM_LOCK_CLASS}, hashtext(room_account));
    RETURN (SELECT COUNT(*) FROM finetunes WHERE account_id = room_account) < most;
END
$room$"""
_INSERT = (
    "INSERT INTO finetunes (id, account_id, name, description, model, created_at, modified_at)"
    " SELECT ?, ?, ?, ?, ?, ?, ? WHERE {room} ON CONFLICT (account_id, name) DO NOTHING"
)
_INSERTS = {
    "sqlite": _INSERT.format(room="(SELECT COUNT(*) FROM finetunes WHERE account_id = ?) < ?"),
    "postgresql": _INSERT.format(room="finetunes_room(?, ?)"),
}
_COLUMNS = (
    "id, account_id, name, description, model, created_at, modified_at,"
    " config_digest, weights_digest, adapter_digest, adapter_path"
)
_DIGEST_COLUMNS = {Asset.CONFIG: "config_digest", Asset.WEIGHTS: "weights_digest"}


class FinetuneStore:
    """The database belongs to whoever opened it, so nothing here closes it."""

    def __init__(self, db: Database, limit: int = 100, clock: Clock = time.time) -> None:
        self._db = db
        self._limit = limit
        self._clock = clock

    @classmethod
    async def open(cls, db: Database, limit: int = 100, clock: Clock = time.time) -> "FinetuneStore":
        await db.migrate(schema(db.dialect))
        return cls(db, limit, clock)

    async def create(self, account_id: str, name: str, model: str, description: str | None) -> Finetune:
        """InvalidInput when the account already has a finetune of that name, or `limit` finetunes."""
        now = self._clock()
        finetune = Finetune(str(uuid.uuid4()), account_id, name, description, model, now, now)
        created = await self._db.execute(
            _INSERTS[self._db.dialect],
            (finetune.id, account_id, name, description, model, now, now, account_id, self._limit),
        )
        if created:
            return finetune
        if await self._by_name(account_id, name) is not None:
            raise InvalidInput(f"the account already has a finetune named '{name}'", param="name")
        raise InvalidInput(
            f"the account has {self._limit} finetunes, the most it may have: delete one first", param="name"
        )

    async def get(self, account_id: str, finetune_id: str) -> Finetune | None:
        row = await self._db.fetch_one(
            f"SELECT {_COLUMNS} FROM finetunes WHERE id = ? AND account_id = ?", (finetune_id, account_id)
        )
        return None if row is None else _finetune(row)

    async def find(self, account_id: str, ref: str) -> Finetune | None:
        """By id, else by name (a name never shadows another finetune's id: ids are UUIDs, checked first)."""
        return await self.get(account_id, ref) or await self._by_name(account_id, ref)

    async def list(self, account_id: str) -> Finetunes:
        """Oldest first, as they were created."""
        rows = await self._db.fetch_all(
            f"SELECT {_COLUMNS} FROM finetunes WHERE account_id = ? ORDER BY created_at, id", (account_id,)
        )
        return [_finetune(row) for row in rows]

    async def delete(self, account_id: str, finetune_id: str) -> bool:
        """Its blobs stay in the store: content-addressed, another finetune may hold the same bytes."""
        deleted = await self._db.execute(
            "DELETE FROM finetunes WHERE id = ? AND account_id = ?", (finetune_id, account_id)
        )
        return deleted > 0

    async def set_asset(self, finetune_id: str, asset: Asset, digest: str) -> Finetune | None:
        """Records (or replaces) one asset of a finetune not yet ready; None if it is gone or became ready."""
        await self._db.execute(
            f"UPDATE finetunes SET {_DIGEST_COLUMNS[asset]} = ?, modified_at = ?"
            " WHERE id = ? AND adapter_digest IS NULL",
            (digest, self._clock(), finetune_id),
        )
        row = await self._db.fetch_one(f"SELECT {_COLUMNS} FROM finetunes WHERE id = ?", (finetune_id,))
        found = None if row is None else _finetune(row)
        return found if found is not None and not found.ready and _holds(found, asset, digest) else None

    async def mark_ready(self, converted: Finetune, adapter_digest: str, adapter_path: str) -> bool:
        """False if its assets changed since `converted` was read (that conversion is stale) or it is gone."""
        marked = await self._db.execute(
            "UPDATE finetunes SET adapter_digest = ?, adapter_path = ?, modified_at = ?"
            " WHERE id = ? AND config_digest = ? AND weights_digest = ? AND adapter_digest IS NULL",
            (
                adapter_digest,
                adapter_path,
                self._clock(),
                converted.id,
                converted.config_digest,
                converted.weights_digest,
            ),
        )
        return marked > 0

    async def resolve(self, account_id: str, model_id: str, ref: str) -> Adapter:
        """The adapter inference applies for `ref` (a finetune's id or name) on `model_id`; InvalidInput (param
        "lora") when the account has no such finetune, it is not ready, or it was made for another model."""
        finetune = await self.find(account_id, ref)
        if finetune is None:
            raise InvalidInput(f"no finetune '{ref}' in this account", param="lora")
        if finetune.model != model_id:
            raise InvalidInput(
                f"finetune '{ref}' was made for {finetune.model}, not {model_id}: run it on {finetune.model}",
                param="lora",
            )
        if finetune.adapter_digest is None or finetune.adapter_path is None:
            raise FinetuneAssetsMissing(_not_ready(ref, finetune), param="lora")
        return Adapter(finetune.id, finetune.name, finetune.adapter_digest, finetune.adapter_path)

    async def _by_name(self, account_id: str, name: str) -> Finetune | None:
        row = await self._db.fetch_one(
            f"SELECT {_COLUMNS} FROM finetunes WHERE account_id = ? AND name = ?", (account_id, name)
        )
        return None if row is None else _finetune(row)


def schema(dialect: str) -> list[str]:
    return [*SCHEMA, POSTGRES_ROOM] if dialect == "postgresql" else list(SCHEMA)


def _not_ready(ref: str, finetune: Finetune) -> str:
    missing = finetune.missing
    if missing:
        names = " and ".join(asset.value for asset in missing)
        return f"finetune '{ref}' is missing required files: upload {names}"
    return f"finetune '{ref}' is not ready: its adapter was not converted (upload its assets again)"


def _holds(finetune: Finetune, asset: Asset, digest: str) -> bool:
    held = finetune.config_digest if asset is Asset.CONFIG else finetune.weights_digest
    return held == digest


def _finetune(row: Row) -> Finetune:
    values: list[Any] = list(row)
    return Finetune(
        str(values[0]),
        str(values[1]),
        str(values[2]),
        None if values[3] is None else str(values[3]),
        str(values[4]),
        float(values[5]),
        float(values[6]),
        *(None if value is None else str(value) for value in values[7:11]),
    )
