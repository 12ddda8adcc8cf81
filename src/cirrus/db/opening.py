"""Open the database a URL names: PostgreSQL for a `postgresql://` DSN, else a SQLite file. Apart from the
interface (database.py), so the engines can import that without importing each other through it."""

from cirrus.db.database import Database
from cirrus.db.guard import DatabaseLimits


def is_postgres_url(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


async def open_database(url: str, limits: DatabaseLimits | None = None) -> Database:
    """A `postgresql://` DSN opens PostgreSQL (with `limits`: its deadlines, pool and breaker); anything else is
    a SQLite file path."""
    if is_postgres_url(url):
        from cirrus.db.postgres import PostgresDatabase

        return await PostgresDatabase.connect(url, limits)
    from cirrus.db.sqlite import SqliteDatabase

    return SqliteDatabase.open(url)
