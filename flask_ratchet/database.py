"""ratchet's own database, for an app without Flask-SQLAlchemy: ``RATCHET_DATABASE_URL``.

Flask-SQLAlchemy stays the default, and the transactional path: jobs are written in the app's
``db.session``, with the app's own rows, committed or rolled back together. An app that has no
database of its own (it calls APIs, renders templates, sends mail) has no session to write jobs
in; with ``RATCHET_DATABASE_URL`` ratchet makes an engine of its own instead, and every
operation then commits by itself, unless it runs inside ``with ratchet.transaction():``.

What :class:`~flask_ratchet.runtime.Runtime` needs of a database is an engine and, where there
is one, the session to join; this module gives the engine, built as Flask-SQLAlchemy would build
the app's (so one URL means the same database to both): a relative SQLite path is in the app's
instance folder, MariaDB and MySQL talk ``utf8mb4`` and recycle connections after two hours,
an in-memory SQLite database (eager tests only) is one connection shared by every thread.

With ``RATCHET_READ_URL`` the console's pages and its metrics read from a PostgreSQL replica
instead (``ReadReplica``): a page marks its reads with ``reading()``, and
``Runtime.connection`` then hands out the replica's connections; nothing else ever does.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import sqlalchemy as sa
from flask import Flask
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import StaticPool

from .config import RatchetConfig
from .errors import ConfigError
from .forks import fresh_pool_after_fork
from .store import check_driver, check_read_url

#: The config keys this module reads (for errors).
KEY = "RATCHET_DATABASE_URL"
READ_KEY = "RATCHET_READ_URL"

#: Set while the block's reads may go to the read replica (:func:`reading`).
_reading: ContextVar[bool] = ContextVar("ratchet_reading", default=False)


def database_for(
    app: Flask, db: SQLAlchemy | None, found: SQLAlchemy | None, config: RatchetConfig
) -> SQLAlchemy | OwnDatabase:
    """The database ratchet uses in ``app``: its own if ``RATCHET_DATABASE_URL`` is set, else
    ``db`` (passed to ``Ratchet``) or ``found`` (the app's Flask-SQLAlchemy), checked now.

    :raises ConfigError: for a URL that names a driver ratchet does not use, or both a URL and
        a ``db=``.
    :raises RuntimeError: with neither a URL nor Flask-SQLAlchemy, saying what to do.
    """
    if config.database_url is not None:
        if db is not None:
            raise ConfigError(
                f"{KEY} gives ratchet a database of its own, and db= another: pass one of them"
            )
        own = OwnDatabase(app, config.database_url)
        check_read_url(own.engine, config)
        return own
    db = db or found
    if db is None:
        raise RuntimeError(
            "flask-ratchet needs Flask-SQLAlchemy: call db.init_app(app) before "
            f"ratchet.init_app(app), or pass db=...; or, for an app without a database of its "
            f"own, set {KEY}"
        )
    if found is not None:
        # Now, not at ratchet's first use: an app factory may query the database before
        # gunicorn --preload forks its web workers, which must not share that connection.
        with app.app_context():
            for engine in db.engines.values():
                fresh_pool_after_fork(engine)
            try:
                check_driver(db.engine)  # at start-up, not in the first request
            except ValueError as exc:
                raise ConfigError(f"SQLALCHEMY_DATABASE_URI: {exc}") from None
            check_read_url(db.engine, config)
    return db


class OwnDatabase:
    """The engine ratchet uses for one app that set ``RATCHET_DATABASE_URL``, made once, at
    ``init_app`` (an engine opens no connection until it is used; a forked web worker gets an
    empty pool of its own, ``flask_ratchet.forks``)."""

    def __init__(self, app: Flask, url: str) -> None:
        made, options = _engine_arguments(app, sa.make_url(url))
        self.engine: Engine = sa.create_engine(made, **options)
        fresh_pool_after_fork(self.engine)
        try:
            check_driver(self.engine)  # at start-up, not in the first request
        except ValueError as exc:
            self.engine.dispose()
            raise ConfigError(f"{KEY}: {exc}") from None

    def __repr__(self) -> str:
        return f"<OwnDatabase {self.engine.url.render_as_string(hide_password=True)}>"


@contextmanager
def reading() -> Iterator[None]:
    """Mark the block as pure reads (a console page, a metrics scrape): with a read replica,
    :meth:`.Runtime.connection` then reads there. The replica refuses writes, and its
    connections are read-only besides, so a write in such a block fails rather than lands."""
    token = _reading.set(True)
    try:
        yield
    finally:
        _reading.reset(token)


def in_reading() -> bool:
    """Whether this code runs inside :func:`reading`."""
    return _reading.get()


def replica_for(config: RatchetConfig) -> ReadReplica | None:
    """The read replica of ``RATCHET_READ_URL``, if it is set (no connection opened yet)."""
    if config.read_url is None:
        return None
    return ReadReplica(config.read_url, pooled=config.transaction_pooling)


class ReadReplica:
    """The engine of ``RATCHET_READ_URL``, made at its first use: a few connections (pages and
    scrapes are short reads), each pinged as it leaves the pool (a replica restarts on its
    own schedule), read-only; behind a transaction pooler none prepares a statement, as the
    dialect's own engines (:class:`~flask_ratchet.store.postgres.PostgresDialect`).

    :raises ConfigError: for a URL whose driver is not psycopg 3.
    """

    #: Connections kept open, and opened beyond them at busy times.
    POOL_SIZE = 2
    MAX_OVERFLOW = 3

    def __init__(self, url: str, *, pooled: bool = False) -> None:
        self.url = sa.make_url(url)
        if self.url.get_driver_name() != "psycopg":
            shown = self.url.set(drivername="postgresql+psycopg", password=None)
            raise ConfigError(
                f"{READ_KEY}: flask-ratchet talks to PostgreSQL through psycopg 3; write the URL "
                f"as {shown.render_as_string(hide_password=True)!r} (with your password)"
            )
        self._pooled = pooled
        self._engine: Engine | None = None
        self._lock = threading.Lock()

    @property
    def engine(self) -> Engine:
        """The replica's engine (made now if it was not yet)."""
        with self._lock:
            if self._engine is None:
                made = sa.create_engine(
                    self.url,
                    pool_size=self.POOL_SIZE,
                    max_overflow=self.MAX_OVERFLOW,
                    pool_pre_ping=True,
                    connect_args={"prepare_threshold": None} if self._pooled else {},
                )
                fresh_pool_after_fork(made)
                self._engine = made
            return self._engine

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        """A read-only connection to the replica, its transaction rolled back at the end."""
        with self.engine.connect() as conn:
            yield conn.execution_options(postgresql_readonly=True)

    def dispose(self) -> None:
        """Close the replica's pooled connections (a later read opens new ones)."""
        with self._lock:
            if self._engine is not None:
                self._engine.dispose()

    def __repr__(self) -> str:
        return f"<ReadReplica {self.url.render_as_string(hide_password=True)}>"


def _engine_arguments(app: Flask, url: sa.URL) -> tuple[sa.URL, dict[str, Any]]:
    """The URL and engine options Flask-SQLAlchemy 3.1 uses for ``url`` in ``app`` (on
    ``mariadb+`` URLs too, which it leaves alone: ratchet's tables are ``utf8mb4``)."""
    options: dict[str, Any] = {}
    backend = url.get_backend_name()
    if backend == "sqlite":
        if url.database in (None, "", ":memory:"):
            # One connection for every thread: each new one would be an empty database.
            options["poolclass"] = StaticPool
            options["connect_args"] = {"check_same_thread": False}
        else:
            uri = bool(url.query.get("uri"))  # sqlite:///file:path?uri=true
            path = url.database[5:] if uri else url.database
            if not os.path.isabs(path):
                os.makedirs(app.instance_path, exist_ok=True)
                path = os.path.join(app.instance_path, path)
                url = url.set(database=f"file:{path}" if uri else path)
    elif backend == "postgresql" and app.config.get("RATCHET_TRANSACTION_POOLING") is True:
        options["connect_args"] = {"prepare_threshold": None}  # see store/postgres.py
    elif backend in ("mysql", "mariadb"):
        options["pool_recycle"] = 7200  # servers close idle connections after 8 hours
        if "charset" not in url.query:
            url = url.update_query_dict({"charset": "utf8mb4"})
    return url, options
