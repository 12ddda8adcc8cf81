"""One interface over SQLite and PostgreSQL.

SQL is written once, with `?` placeholders and the subset both engines share (`INSERT ... ON CONFLICT`,
`BIGINT`, `DOUBLE PRECISION`, `TEXT`); the PostgreSQL side rewrites the placeholders.
"""

from collections.abc import Sequence
from typing import Any, Protocol

Row = tuple[Any, ...]
Params = Sequence[Any]


class Database(Protocol):
    dialect: str

    async def execute(self, sql: str, params: Params = ()) -> int:
        """Run one statement; return the number of rows it changed."""
        ...

    async def execute_many(self, sql: str, rows: Sequence[Params]) -> None: ...

    async def fetch_all(self, sql: str, params: Params = ()) -> list[Row]:
        """A read: SQLite answers it on a reader connection, which refuses a write (writes go to `execute`)."""
        ...

    async def fetch_one(self, sql: str, params: Params = ()) -> Row | None: ...

    async def migrate(self, statements: Sequence[str]) -> None:
        """Run idempotent DDL (`CREATE ... IF NOT EXISTS`)."""
        ...

    async def close(self) -> None: ...
