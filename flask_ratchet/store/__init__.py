"""The only SQL in flask-ratchet: one :class:`Store` per database, made of per-noun parts that
share one :class:`~.dialect.Dialect` (PostgreSQL's, MariaDB's or SQLite's).

========================  =================================================================
``store.jobs``            job rows: submission, the claim, operators' status changes, reads
``store.executions``      what workers write: outcomes, executions, log lines, DLQ alerts
``store.flows``           what links jobs (conditions, batches) and what a job's end sets off
``store.cluster``         nodes, leases, orphan recovery, the next due time, retention
``store.resources``       resource limits and permits
``store.queues``          paused queues, and what each queue holds
``store.recurring``       recurring masters
``store.health``          how the queues are doing: due jobs, the oldest one's wait, p95 wait
``store.bulk``            cancel, retry, delete every job a filter matches, a chunk at a time
========================  =================================================================

Every method takes the :class:`~sqlalchemy.engine.Connection` to run on, so the caller decides
the transaction (the request's, or one of its own: :meth:`Store.begin`). What crosses this
boundary is in :mod:`.types`.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ..columns import MYSQL_NAMES
from ..config import RatchetConfig
from ..errors import ConfigError
from .bulk import Bulk
from .cluster import Cluster
from .dialect import Dialect
from .executions import Executions
from .flows import Flows
from .health import Health
from .jobs import Jobs
from .mysql import MySQLDialect, check_server
from .postgres import PostgresDialect
from .queues import Queues
from .recurring import Recurring
from .resources import Resources
from .sqlite import SqliteDialect
from .types import ReplicaLag


class Store:
    """Every part of the store, over one dialect."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.flows = Flows(dialect)
        self.queues = Queues(dialect)
        self.jobs = Jobs(dialect, self.flows, self.queues)
        self.executions = Executions(dialect, self.flows)
        self.cluster = Cluster(dialect, self.flows)
        self.resources = Resources(dialect)
        self.recurring = Recurring(dialect, self.jobs)
        self.health = Health()
        self.bulk = Bulk(self.jobs)

    # Transactions and the clock, which every caller needs: the dialect's.

    def prepare(self, engine: Engine) -> None:
        """Once per process, before first use: settings the database needs."""
        self.dialect.prepare(engine)

    def begin(self, engine: Engine) -> AbstractContextManager[Connection]:
        """A write transaction on ``engine``: committed at the end, rolled back on error."""
        return self.dialect.begin(engine)

    def savepoint(self, conn: Connection) -> AbstractContextManager[None]:
        """A savepoint in ``conn``'s transaction (see :meth:`.Dialect.savepoint`)."""
        return self.dialect.savepoint(conn)

    def claim_engine(self, engine: Engine, timeout: float | None = None) -> Engine:
        """The engine a worker claims with (see :meth:`.Dialect.claim_engine`)."""
        return self.dialect.claim_engine(engine, timeout)

    def single_statement(self, engine: Engine) -> AbstractContextManager[Connection]:
        """A connection for work that is one atomic write (the claim, a submission)."""
        return self.dialect.single_statement(engine)

    def now(self, conn: Connection) -> datetime:
        """The database's current time (UTC)."""
        return self.dialect.now(conn)

    def replica_lag(self, conn: Connection) -> ReplicaLag:
        """How far ``conn``'s server, a read replica, is behind its primary."""
        return self.dialect.replica_lag(conn)


def store_for(engine: Engine, config: RatchetConfig | None = None) -> Store:
    """Return the store for ``engine``'s dialect.

    :raises ValueError: for a database flask-ratchet does not support (yet).
    """
    name = engine.dialect.name
    if config is not None:
        check_read_url(engine, config)
    if name == "postgresql":
        check_driver(engine)
        if config is None or not config.transaction_pooling:
            return Store(PostgresDialect())
        listen = None if config.listen_url is None else sa.make_url(config.listen_url)
        return Store(PostgresDialect(pooled=True, listen_url=listen))
    if name == "sqlite":
        config = config or RatchetConfig()
        return Store(SqliteDialect(synchronous=config.sqlite_synchronous))
    if name in MYSQL_NAMES:
        check_server(engine)
        return Store(MySQLDialect())
    raise ValueError(f"flask-ratchet does not support {name!r}; use PostgreSQL, MariaDB or SQLite")


def check_shared(engine: Engine, config: RatchetConfig) -> None:
    """Refuse a database the app's workers could not see: an in-memory SQLite database, unless
    jobs run in the app's own process (eager mode, for tests).

    :raises ValueError: saying what to use instead.
    """
    memory = engine.dialect.name == "sqlite" and engine.url.database in (None, "", ":memory:")
    if memory and not config.eager:
        raise ValueError(
            "flask-ratchet needs a SQLite file shared by the app and its workers, not an "
            "in-memory database; use a URL like 'sqlite:///instance/app.db' (an in-memory "
            "database works in tests that run jobs in-process: RATCHET_EAGER = True)"
        )


def check_read_url(engine: Engine, config: RatchetConfig) -> None:
    """Refuse a read replica (``RATCHET_READ_URL``) of a database other than PostgreSQL.

    :raises ConfigError: naming the setting and the database.
    """
    name = engine.dialect.name
    if config.read_url is not None and name != "postgresql":
        raise ConfigError(
            f"RATCHET_READ_URL: read replicas are supported on PostgreSQL only, and this app's "
            f"database is {name}; remove the setting"
        )


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


__all__ = [
    "Jobs",
    "Recurring",
    "Store",
    "check_driver",
    "check_read_url",
    "check_shared",
    "store_for",
]
