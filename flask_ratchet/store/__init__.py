"""The only SQL in flask-ratchet. :func:`store_for` picks the implementation for an engine."""

from __future__ import annotations

from sqlalchemy.engine import Engine

from ..config import RatchetConfig
from .base import JobStore
from .postgres import PostgresStore
from .sql import SqlJobStore
from .sqlite import SqliteStore


def store_for(engine: Engine, config: RatchetConfig | None = None) -> SqlJobStore:
    """Return the store for ``engine``'s dialect.

    :raises ValueError: for a database flask-ratchet does not support (yet).
    """
    name = engine.dialect.name
    if name == "postgresql":
        if engine.dialect.driver != "psycopg":
            raise ValueError(
                f"PostgreSQL through {engine.dialect.driver!r} is not supported; use a "
                "'postgresql+psycopg://' URL (psycopg 3)"
            )
        return PostgresStore()
    if name == "sqlite":
        if engine.url.database in (None, "", ":memory:"):
            raise ValueError(
                "flask-ratchet needs a SQLite file shared by the app and its workers, not an "
                "in-memory database; use a URL like 'sqlite:///instance/app.db'"
            )
        return SqliteStore(synchronous=(config or RatchetConfig()).sqlite_synchronous)
    raise ValueError(f"flask-ratchet does not support {name!r} yet; use PostgreSQL or SQLite")


def _conforms(postgres: PostgresStore, sqlite: SqliteStore) -> tuple[JobStore, JobStore]:
    """Never called: mypy checks here that both stores satisfy the protocols of :mod:`.base`."""
    return postgres, sqlite


__all__ = ["PostgresStore", "SqlJobStore", "SqliteStore", "store_for"]
