"""The gateway's relational store: SQLite (embedded, WAL) or PostgreSQL, behind one small interface."""

from cirrus.db.database import Database, Row
from cirrus.db.guard import DatabaseLimits
from cirrus.db.opening import open_database

__all__ = ["Database", "DatabaseLimits", "Row", "open_database"]
