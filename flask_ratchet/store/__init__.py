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
        check_driver(engine)
        return PostgresStore()
    if name == "sqlite":
        if engine.url.database in (None, "", ":memory:"):
            raise ValueError(
                "flask-ratchet needs a SQLite file shared by the app and its workers, not an "
                "in-memory database; use a URL like 'sqlite:///instance/app.db'"
            )
        return SqliteStore(synchronous=(config or RatchetConfig()).sqlite_synchronous)
    raise ValueError(f"flask-ratchet does not support {name!r} yet; use PostgreSQL or SQLite")


def check_driver(engine: Engine) -> None:
    """Refuse a PostgreSQL engine on another driver than psycopg 3, saying what to write.

    ratchet's hot paths run on psycopg 3 itself (binary ``COPY``, its cursors, ``LISTEN``), so
    a second driver would mean a second implementation of each; psycopg 3 runs SQLAlchemy apps
    unchanged, so the app moves to it rather than ratchet carrying both.

    :raises ValueError: for ``postgresql://`` (psycopg2), ``postgresql+asyncpg://`` and the like.
    """
    driver = engine.dialect.driver
    if engine.dialect.name == "postgresql" and driver != "psycopg":
        url = engine.url.set(drivername="postgresql+psycopg", password=None)
        shown = url.render_as_string(hide_password=True)
        raise ValueError(
            f"flask-ratchet talks to PostgreSQL through psycopg 3, and this engine uses "
            f"{driver!r} (before SQLAlchemy 2.1 a plain 'postgresql://' URL means psycopg2). "
            f"Write the URL as {shown!r} (with your password) and install psycopg 3 with "
            "pip install 'flask-ratchet[postgresql]': your models and queries work on it unchanged"
        )


def _conforms(postgres: PostgresStore, sqlite: SqliteStore) -> tuple[JobStore, JobStore]:
    """Never called: mypy checks here that both stores satisfy the protocols of :mod:`.base`."""
    return postgres, sqlite


__all__ = ["PostgresStore", "SqlJobStore", "SqliteStore", "check_driver", "store_for"]
