"""Which generation of each item's chunks a search sees: one row per item, switched by one statement.

The Database protocol has no transactions, and an item's chunks take several statements to write (many chunks,
and PostgreSQL bounds each statement's time), so both back-ends write them under a new generation that no search
sees, switch the item's row to it (`flip`), then remove the older generations. A search reads only chunks of
the generation the row names: an item's old chunks or its new ones, never part of either. A write that crashed
before its flip leaves chunks no search reads, which the item's next write or delete removes.

Generations are nanosecond times and the flip only moves forward, so of two writers racing on one item the one
that started its write later wins, and the other's chunks are removed as superseded.
"""

import time
from typing import Any

from cirrus.db.database import Database

SCHEMA = """CREATE TABLE IF NOT EXISTS rag_live (
    instance_uid TEXT NOT NULL,
    item_id TEXT NOT NULL,
    generation BIGINT NOT NULL,
    key TEXT NOT NULL,
    PRIMARY KEY (instance_uid, item_id)
)"""
# A chunk row's generation is superseded when older than the live one (or than `generation` + 1, the writer's
# own, where the item was deleted meanwhile: its chunks go, a newer writer's stay).
SUPERSEDED = "generation < COALESCE((SELECT l.generation FROM rag_live l WHERE l.instance_uid = ? AND l.item_id = ?), ?)"
# A chunk table aliased `c` joined to the row that makes its chunks visible.
LIVE_JOIN = "JOIN rag_live l ON l.instance_uid = ? AND l.item_id = c.item_id AND l.generation = c.generation"


def new_generation() -> int:
    return time.time_ns()


def superseded_params(instance_uid: str, item_id: str, generation: int) -> tuple[Any, ...]:
    return (instance_uid, item_id, generation + 1)


async def flip(db: Database, instance_uid: str, item_id: str, key: str, generation: int) -> None:
    """Make `generation` the item's visible one, unless a newer one already is."""
    await db.execute(
        "INSERT INTO rag_live (instance_uid, item_id, generation, key) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (instance_uid, item_id) DO UPDATE SET generation = excluded.generation, key = excluded.key"
        " WHERE rag_live.generation < excluded.generation",
        (instance_uid, item_id, generation, key),
    )


async def hide(db: Database, instance_uid: str, item_id: str | None = None) -> None:
    """No search sees the item (None: any of the instance's) from now on."""
    if item_id is None:
        await db.execute("DELETE FROM rag_live WHERE instance_uid = ?", (instance_uid,))
    else:
        await db.execute(
            "DELETE FROM rag_live WHERE instance_uid = ? AND item_id = ?", (instance_uid, item_id)
        )


async def indexed(db: Database, instance_uid: str) -> list[tuple[str, str, float]]:
    """Each searchable item's (id, key, when the write of its visible chunks began, in Unix seconds): its
    generation, which neither a retry nor a later failed write moves."""
    rows = await db.fetch_all(
        "SELECT item_id, key, generation FROM rag_live WHERE instance_uid = ?", (instance_uid,)
    )
    return [(str(item_id), str(key), int(generation) / 1e9) for item_id, key, generation in rows]
