"""The gateway's relational store: SQLite (embedded, WAL) or PostgreSQL, behind one small interface."""

from cirrus.db.database import Database, Row, open_database
from cirrus.db.guard import DatabaseLimits

__all__ = ["Database", "DatabaseLimits", "Row", "open_database"]
