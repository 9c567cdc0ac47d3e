"""Statements compiled once and run straight on the DBAPI cursor.

``Connection.execute`` does real work on every call: it looks the statement up in the compiled
cache, builds an execution context and result metadata, and fires the engine's events. On this
machine that is about 50 µs per statement, a fifth of submitting one job on SQLite and a tenth on
PostgreSQL. The per-job statements on those paths (one job's insert, SQLite's ``BEGIN
IMMEDIATE``, PostgreSQL's claim and completion batch) are compiled here once instead, with their
parameters converted by the same type processors SQLAlchemy would use, and sent to the driver's
cursor.

What stays the same: the statement runs in the connection's transaction (begun first if none is,
unless the connection is in autocommit), a missing parameter is refused, a driver error comes back
as SQLAlchemy's exception class for it (``IntegrityError``, ``OperationalError`` …, with ``orig``;
parameters hidden if the engine hides them), and a lost connection is invalidated. What does not:
engine events (``before_cursor_execute``, ``handle_error``) do not see these statements (so neither
does an instrumentation built on them: while tracing is on, each gets a span of ratchet's own, see
:class:`flask_ratchet.tracing.Statement`), a lost connection does not invalidate the rest of the
pool (each pooled connection is found dead at its own next use), and rows come back as the driver
made them, without result processing.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.engine.interfaces import DBAPICursor
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

from .. import tracing


class DriverStatement:
    """One statement, compiled for ``dialect`` (with exactly ``column_keys`` in an INSERT's
    VALUES), run by :meth:`execute` on the driver's cursor."""

    def __init__(
        self,
        stmt: ClauseElement,
        dialect: Dialect,
        column_keys: Sequence[str] | None = None,
    ) -> None:
        compiled = stmt.compile(
            dialect=dialect, column_keys=list(column_keys) if column_keys is not None else None
        )
        assert isinstance(compiled, SQLCompiler)
        # Parameters are sent as they are named here: nothing may need rendering at execution
        # time (an expanding IN, a literal) or a name the driver cannot take as it is.
        assert not compiled.escaped_bind_names, "bind names need escaping"
        binds = dict(compiled.binds)
        assert not any(b.expanding or b.literal_execute for b in binds.values()), stmt
        self._stmt = stmt  # kept alive: the cache below is keyed by its id
        self._sql = compiled.string
        self._system = dialect.name  # the database, for tracing's spans
        #: Parameter names in order for a positional paramstyle (SQLite's ``?``), else None.
        self._positions: Sequence[str] | None = compiled.positiontup
        self._binds = binds
        self._processors: dict[str, Callable[[Any], Any] | None] = {
            # The dialect's own implementation of each type, as SQLAlchemy binds it (SQLite's
            # DATETIME writes text in its own format, for instance).
            key: bind.type.dialect_impl(dialect).bind_processor(dialect)
            for key, bind in binds.items()
        }
        #: (name, processor, whether it gives None for None) in the order the driver takes the
        #: parameters: a None value skips a processor that would give None back (most of a
        #: job's columns are NULL: each call saved is a few hundred nanoseconds).
        self._plan = [
            (k, self._processors[k], _keeps_none(self._processors[k]))
            for k in (self._positions or binds)
        ]

    def execute(self, conn: Connection, params: Mapping[str, Any]) -> list[Any]:
        """Run the statement in ``conn``'s transaction; return the rows it returned (raw)."""
        try:  # every parameter given, the common case: one pass
            converted = [
                params[k] if p is None else v if (v := params[k]) is None and none_kept else p(v)
                for k, p, none_kept in self._plan
            ]
        except KeyError:  # a default to fill in, or a required one missing: refused there
            converted = [self._value(k, params) for k, _, _ in self._plan]
        values: Sequence[Any] | dict[str, Any]
        if self._positions is None:
            values = dict(zip(self._binds, converted, strict=True))
        else:
            values = tuple(converted)
        if not conn.in_transaction() and not autocommit(conn):
            conn.begin()  # as conn.execute would (autobegin): the caller's commit() covers it
        traced = tracing.statement(self._system, self._sql)
        try:  # errors as SQLAlchemy's (see translated_errors; written out: a context manager
            # costs microseconds on a path taken per job)
            if traced is tracing.UNTRACED:  # the common case, without a span's bookkeeping
                return self._send(conn, values, traced)
            with traced:
                return self._send(conn, values, traced)
        except conn.dialect.loaded_dbapi.Error as exc:
            raise _translated(conn, self._sql, values, exc) from exc

    def _send(self, conn: Connection, values: Any, traced: tracing.Statement) -> list[Any]:
        """Send the statement with its converted ``values``; the rows it returned (raw)."""
        cursor: DBAPICursor = conn.connection.cursor()
        try:
            cursor.execute(self._sql, values)
            rows = list(cursor.fetchall()) if cursor.description is not None else []
            traced.affected = len(rows) or cursor.rowcount
            return rows
        finally:
            cursor.close()

    def _value(self, key: str, params: Mapping[str, Any]) -> Any:
        bind = self._binds[key]
        if key in params:
            value = params[key]
        elif bind.required:
            raise sa.exc.ArgumentError(f"no value for the parameter {key!r} of {self._sql}")
        else:
            value = bind.effective_value
        processor = self._processors[key]
        return value if processor is None else processor(value)


def autocommit(conn: Connection) -> bool:
    """Whether ``conn`` runs each statement in a transaction of its own (PostgreSQL's
    :meth:`.Dialect.single_statement`, or a claim engine's), rather than in a caller's: read off
    psycopg's connection (``autocommit``; the MariaDB drivers' is a method, and ratchet never
    puts their connections, nor SQLite's, in autocommit). The driver then begins
    nothing: SQLAlchemy's bookkeeping of a transaction the server never sees (and its rollback
    at the end) costs about 12 µs of the client's time per statement here."""
    return getattr(conn.connection.driver_connection, "autocommit", None) is True


@contextmanager
def translated_errors(conn: Connection, statement: str, params: Any) -> Iterator[None]:
    """Raise a driver error from inside as SQLAlchemy's exception for it, as
    ``conn.execute`` would (``orig`` is the driver's), and invalidate a lost connection."""
    try:
        yield
    except conn.dialect.loaded_dbapi.Error as exc:
        raise _translated(conn, statement, params, exc) from exc


def _translated(
    conn: Connection, statement: str, params: Any, exc: Exception
) -> sa.exc.StatementError:
    """SQLAlchemy's exception for the driver's error ``exc``; a lost connection invalidated."""
    lost = conn.dialect.is_disconnect(
        exc,  # type: ignore[arg-type]  # the dialect's own DBAPI Error
        conn.connection.dbapi_connection,
        None,
    )
    if lost:
        conn.invalidate(exc)
    return sa.exc.DBAPIError.instance(
        statement,
        params,
        exc,
        conn.dialect.loaded_dbapi.Error,
        hide_parameters=conn.engine.hide_parameters,
        connection_invalidated=lost,
        dialect=conn.dialect,
    )


def _keeps_none(processor: Callable[[Any], Any] | None) -> bool:
    """Whether ``processor`` gives ``None`` for ``None`` (so need not be called for it)."""
    if processor is None:
        return True
    try:
        return processor(None) is None
    except Exception:  # a processor that refuses None: call it, and let it refuse
        return False


@functools.cache
def _savepoint_statements(depth: int) -> tuple[sa.TextClause, sa.TextClause, sa.TextClause]:
    """SAVEPOINT, RELEASE and ROLLBACK TO for a savepoint ``depth`` levels deep."""
    name = f"ratchet_write_{depth}"
    return (
        sa.text(f"SAVEPOINT {name}"),
        sa.text(f"RELEASE SAVEPOINT {name}"),
        sa.text(f"ROLLBACK TO SAVEPOINT {name}"),
    )


#: ``Connection.info`` key: how many of these savepoints are open on the connection.
_DEPTH = "ratchet_savepoints"


@contextmanager
def savepoint(conn: Connection) -> Iterator[None]:
    """Run the block in a savepoint of ``conn``'s transaction (begun first if none is): if it
    raises, what it wrote is rolled back and the transaction goes on; else it is released.

    On the driver's cursor: ``Connection.begin_nested`` costs about 60 µs here on SQLite (a
    fifth of a submission in a request) against 11 µs, and on PostgreSQL 140 µs against the
    two round trips' 63 µs. SQLAlchemy does not see this savepoint, so the block must not end
    the transaction. A nested one has a name of its own: MariaDB replaces a savepoint of the
    same name instead of nesting it.
    """
    depth = conn.info.get(_DEPTH, 0)
    begin, release, rollback_to = _savepoint_statements(depth)
    driver_statement(begin, conn.dialect).execute(conn, {})
    conn.info[_DEPTH] = depth + 1
    try:
        yield
    except BaseException:
        if not conn.invalidated:  # a lost connection has no savepoint to go back to
            driver_statement(rollback_to, conn.dialect).execute(conn, {})
            driver_statement(release, conn.dialect).execute(conn, {})
        raise
    finally:
        conn.info[_DEPTH] = depth
    driver_statement(release, conn.dialect).execute(conn, {})


# Per dialect object (so per engine and its settings), dropped with it.
_cache: weakref.WeakKeyDictionary[
    Dialect, dict[tuple[int, tuple[str, ...] | None], DriverStatement]
] = weakref.WeakKeyDictionary()


def driver_statement(
    stmt: ClauseElement, dialect: Dialect, column_keys: Sequence[str] | None = None
) -> DriverStatement:
    """``stmt`` compiled for ``dialect``, once per engine (the entry keeps ``stmt`` alive, so
    its id is not reused while the entry exists)."""
    keys = tuple(column_keys) if column_keys is not None else None
    compiled = _cache.setdefault(dialect, {})
    found = compiled.get((id(stmt), keys))
    if found is None:
        found = compiled[(id(stmt), keys)] = DriverStatement(stmt, dialect, keys)
    return found
