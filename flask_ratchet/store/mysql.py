"""MariaDB (10.6 and later): the third store, with the same behaviour as PostgreSQL.

- **Isolation.** ratchet's own transactions run at ``READ COMMITTED``: at MariaDB's default
  ``REPEATABLE READ``, a locking read of a range (the claim) also locks the gaps between its
  rows, and concurrent claimers and submitters deadlock on them. Engines ratchet makes (a
  worker's, its claim engine) are set so once per connection; on the app's engine each of
  ratchet's transactions is begun with ``SET TRANSACTION ISOLATION LEVEL READ COMMITTED``,
  which lasts for that transaction only (the app's own transactions keep the app's level).
- **The clock** is the server's ``UTC_TIMESTAMP(6)``, whatever the server's or the session's
  ``time_zone``; times are ``DATETIME(6)`` in UTC (:mod:`flask_ratchet.columns`).
- **The claim** (:mod:`.mysql_claim`) locks the oldest due rows of each priority level with
  ``SELECT … FOR UPDATE SKIP LOCKED`` on the claim index, picks the best in Python, and marks
  them RUNNING by primary key: a short transaction whose cost is flat in the backlog.
- **No RETURNING on UPDATE**: :meth:`MySQLDialect.updated` locks the rows, updates them by key
  and reads them back. ``INSERT`` and ``DELETE`` have ``RETURNING`` (MariaDB 10.5 and later).
- **No ON CONFLICT DO NOTHING**: ``INSERT IGNORE`` for tables whose only unique key is their
  primary key; jobs (three unique keys) are written by :mod:`.mysql_submission`, which looks up
  idempotency keys first, so a recurring occurrence's second child is refused, not skipped.
- **Wake-ups**: no ``LISTEN``: workers poll (adaptively) and are woken in-process, waiters read
  their job every second, unless ``RATCHET_WAKEUP_URL`` names a Redis (see :mod:`.wakeup`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Connection, Engine, Row
from sqlalchemy.sql.elements import ClauseElement, ColumnElement

from ..columns import UtcDateTime
from .dialect import Dialect, chunks
from .driver import driver_statement
from .mysql_claim import claim
from .mysql_submission import insert_jobs
from .types import ClaimedJob, Inserted, NewJob

#: MariaDB's errors for a transaction chosen to break a deadlock, and for a lock wait given up.
DEADLOCK = 1213
LOCK_WAIT_TIMEOUT = 1205
#: The oldest MariaDB this store runs on: ``SKIP LOCKED`` came in 10.6.
OLDEST = (10, 6)
READ_COMMITTED = "READ COMMITTED"
_SET_READ_COMMITTED = sa.text("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
#: An execution option marking an engine whose connections are all at READ COMMITTED.
_RC_OPTION = "ratchet_read_committed"
#: The named lock schema changes hold (``GET_LOCK``), and how long one waits for it (seconds).
SCHEMA_LOCK = "ratchet_schema"
SCHEMA_LOCK_WAIT = 600


def check_server(engine: Engine) -> None:
    """Refuse a server this store cannot run on, saying what it needs.

    :raises ValueError: for MySQL (no ``RETURNING``) or a MariaDB older than 10.6.
    """
    with engine.connect():
        pass  # the dialect reads the server's version on its first connection
    dialect = engine.dialect
    version = tuple(dialect.server_version_info or ())
    if not dialect.is_mariadb:  # type: ignore[attr-defined]
        shown = ".".join(map(str, version))
        raise ValueError(
            f"flask-ratchet runs on MariaDB 10.6 or later, and this server is MySQL {shown}: "
            "ratchet's MySQL store needs INSERT and DELETE … RETURNING, which MySQL lacks. "
            "Use MariaDB, PostgreSQL or SQLite"
        )
    if version < OLDEST:
        shown = ".".join(map(str, version))
        raise ValueError(
            f"flask-ratchet needs MariaDB 10.6 or later (for SKIP LOCKED); this server is "
            f"MariaDB {shown}"
        )


class MySQLDialect(Dialect):
    """The dialect of ``mariadb+pymysql://``, ``mysql+pymysql://`` and ``mysql+mysqldb://``
    URLs reaching MariaDB."""

    insert = staticmethod(mysql.insert)

    # -- transactions --------------------------------------------------------------------------

    @contextmanager
    def begin(self, engine: Engine) -> Iterator[Connection]:
        with engine.connect() as conn, conn.begin():
            if not conn.get_execution_options().get(_RC_OPTION):
                driver_statement(_SET_READ_COMMITTED, conn.dialect).execute(conn, {})
            yield conn

    def transient(self, exc: BaseException) -> bool:
        args: tuple[Any, ...] = getattr(getattr(exc, "orig", None), "args", ())
        return bool(args) and args[0] in (DEADLOCK, LOCK_WAIT_TIMEOUT)

    @contextmanager
    def schema_transaction(self, engine: Engine) -> Iterator[Connection]:
        # DDL commits as it goes here, so the lock is a named one, held by a connection of its
        # own until the upgrade's transaction has committed.
        with engine.connect() as holder:
            got = holder.execute(
                sa.text("SELECT GET_LOCK(:name, :wait)"),
                {"name": SCHEMA_LOCK, "wait": SCHEMA_LOCK_WAIT},
            ).scalar()
            if got != 1:
                raise RuntimeError(
                    f"waited {SCHEMA_LOCK_WAIT}s for another upgrade of ratchet's tables "
                    f"(the lock {SCHEMA_LOCK!r}) to end; run 'flask ratchet db upgrade' again"
                )
            try:
                with self.begin(engine) as conn:
                    yield conn
            finally:
                holder.execute(sa.text("SELECT RELEASE_LOCK(:name)"), {"name": SCHEMA_LOCK})
                holder.rollback()

    def claim_engine(self, engine: Engine, timeout: float | None = None) -> Engine:
        claims = self._read_committed_engine(engine.url, pool_size=1, max_overflow=0)
        if timeout is not None:
            _on_connect(claims, f"SET SESSION max_statement_time = {timeout:.6f}")
        return claims

    def worker_engine(self, url: sa.URL, concurrency: int, stalled_after: float) -> Engine:
        engine = self._read_committed_engine(url, pool_size=4, max_overflow=4)
        limit = f"SET SESSION idle_transaction_timeout = {max(1, math.ceil(stalled_after))}"
        _on_connect(engine, limit)
        return engine

    def _read_committed_engine(self, url: sa.URL, **pool: int) -> Engine:
        return sa.create_engine(
            url,
            isolation_level=READ_COMMITTED,
            execution_options={_RC_OPTION: True},
            **pool,
        )

    # -- the clock -----------------------------------------------------------------------------

    def now(self, conn: Connection) -> datetime:
        return conn.execute(sa.select(self.now_sql())).scalar_one()

    def now_sql(self) -> ColumnElement[datetime]:
        return sa.func.utc_timestamp(6, type_=UtcDateTime())

    def ago_sql(self, seconds: float) -> ColumnElement[datetime]:
        return self.later_sql(-seconds)

    def later_sql(self, seconds: float) -> ColumnElement[datetime]:
        return sa.func.timestampadd(
            sa.literal_column("MICROSECOND"),
            sa.literal(round(seconds * 1_000_000), sa.BigInteger),
            sa.func.utc_timestamp(6),
            type_=UtcDateTime(),
        )

    def hour_sql(self) -> ColumnElement[datetime]:
        hour = sa.func.date_format(sa.func.utc_timestamp(), "%Y-%m-%d %H:00:00")
        return sa.type_coerce(sa.cast(hour, mysql.DATETIME(fsp=6)), UtcDateTime())

    # -- writes --------------------------------------------------------------------------------

    def insert_ignoring(self, table: sa.Table, key: str, where: str | None = None) -> Any:
        # Every table this is used on has ``key`` as its only unique key (jobs, which have
        # three, are written by own_insert), so IGNORE skips exactly the conflicts on it.
        assert [c.name for c in table.primary_key.columns] == [key], table.name
        return mysql.insert(table).prefix_with("IGNORE")

    def upsert(
        self,
        table: sa.Table,
        keys: Sequence[str],
        values: dict[str, Any],
        update: Callable[[Any], dict[str, Any]],
        where: Callable[[Any], ColumnElement[bool]] | None = None,
    ) -> Any:
        if where is not None:
            raise NotImplementedError("MariaDB: use upserted() for a conditional upsert")
        stmt = mysql.insert(table).values(**values)
        return stmt.on_duplicate_key_update(**update(stmt.inserted))

    def upserted(
        self,
        conn: Connection,
        table: sa.Table,
        keys: Sequence[str],
        values: dict[str, Any],
        update: Callable[[Any], dict[str, Any]],
        where: Callable[[Any], ColumnElement[bool]] | None = None,
        returning: Sequence[Any] = (),
    ) -> Row[Any] | None:
        if where is None:
            return super().upserted(conn, table, keys, values, update, where, returning)
        returning = tuple(returning or table.primary_key.columns)
        same_key = sa.and_(*(table.c[k] == values[k] for k in keys))
        found = conn.execute(sa.select(*returning).where(same_key).with_for_update()).first()
        if found is None:
            try:
                with self.savepoint(conn):
                    stmt = mysql.insert(table).values(**values).returning(*returning)
                    return conn.execute(stmt).first()
            except sa.exc.IntegrityError:
                pass  # inserted meanwhile by another transaction: update it as below
        new = _Proposed(table, values)
        changed = conn.execute(sa.update(table).where(same_key, where(new)).values(update(new)))
        if changed.rowcount == 0:
            return None
        return conn.execute(sa.select(*returning).where(same_key)).first()

    def updated(self, conn: Connection, stmt: sa.Update, *columns: Any) -> list[Any]:
        table = stmt.table
        assert isinstance(table, sa.Table)
        (key,) = table.primary_key.columns
        assert stmt.whereclause is not None, "an UPDATE of every row"
        locked = sa.select(key).where(stmt.whereclause).with_for_update()
        ids = list(conn.execute(locked).scalars())
        if not ids:
            return []
        # The rows just locked still match: the update changes exactly them.
        conn.execute(stmt.where(key.in_(ids)))
        return list(conn.execute(sa.select(*columns).where(key.in_(ids))))

    def own_insert(self, conn: Connection, jobs: Sequence[NewJob]) -> list[Inserted]:
        return insert_jobs(self, conn, jobs)

    def own_cold_ends(self, conn: Connection, rows: Sequence[dict[str, Any]]) -> bool:
        for part in chunks(rows):
            conn.exec_driver_sql(_cold_ends_sql(len(part)), _cold_ends_params(part))
        return True

    # -- the claim -----------------------------------------------------------------------------

    def claim_due(
        self,
        conn: Connection,
        limit: int,
        node_id: str,
        boost_minutes: int,
        quotas: Mapping[str, int] | None = None,
        refused: Collection[str] = (),
    ) -> list[ClaimedJob]:
        return claim(conn, limit, node_id, boost_minutes, quotas, refused)

    def indexed(self, table: sa.Table, index: str) -> Any:
        return sa.text(f"{table.name} FORCE INDEX ({index})")


_COLD_END_COLUMNS = (
    "b_job_id", "b_status", "b_result", "b_error", "b_fingerprint", "b_attempts", "b_progress",
)  # fmt: skip


@functools.lru_cache(maxsize=64)
def _cold_ends_sql(rows: int) -> str:
    """``END_COLD_ROW`` for ``rows`` jobs in one statement: the cold rows joined to a derived
    table of the outcomes (positional parameters, ``_COLD_END_COLUMNS`` for each row)."""
    # The ids travel as hex: a driver may send bytes as a string in the connection's character
    # set (PyMySQL before 1.1.1, mysqlclient), which a UUID's bytes seldom are.
    first = (
        "SELECT UNHEX(%s) AS job_id, %s AS st, %s AS res, %s AS err, %s AS fp, %s AS att, "
        "%s AS prog"
    )
    more = " UNION ALL SELECT UNHEX(%s), %s, %s, %s, %s, %s, %s"
    return (
        f"UPDATE ratchet_job j JOIN ({first}{more * (rows - 1)}) v ON j.job_id = v.job_id "
        "SET j.terminal_status = v.st, j.result = v.res, j.terminal_error = v.err, "
        "j.fingerprint = v.fp, j.attempts = v.att, j.progress = v.prog, "
        "j.finished_at = UTC_TIMESTAMP(6)"
    )


def _cold_ends_params(rows: Sequence[dict[str, Any]]) -> tuple[Any, ...]:
    """The parameters of :func:`_cold_ends_sql`, as the driver takes them."""
    params: list[Any] = []
    for row in rows:
        job_id, status, *rest = (row[name] for name in _COLD_END_COLUMNS)
        params += [job_id.hex, str(status), *rest]
    return tuple(params)


class _Proposed:
    """The row an upsert proposed, as ``new`` in its ``update`` and ``where``: each column's
    value as SQL."""

    def __init__(self, table: sa.Table, values: dict[str, Any]) -> None:
        self._table = table
        self._values = values

    def __getattr__(self, name: str) -> Any:
        value = self._values[name]
        if isinstance(value, ClauseElement):
            return value
        return sa.literal(value, self._table.c[name].type)


def _on_connect(engine: Engine, setting: str) -> None:
    """Run ``setting`` (a ``SET SESSION``) on each new connection of ``engine``."""

    @sa.event.listens_for(engine, "connect")
    def set_session(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(setting)
        finally:
            cursor.close()
