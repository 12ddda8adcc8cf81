"""The gateway's relational store: SQLite (embedded, WAL) or PostgreSQL, behind one small interface."""

from cirrus.db.database import Database, Row, open_database

__all__ = ["Database", "Row", "open_database"]
