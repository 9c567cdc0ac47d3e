"""Statements compiled once and run straight on the DBAPI cursor.

``Connection.execute`` does real work on every call: it looks the statement up in the compiled
cache, builds an execution context and result metadata, and fires the engine's events. On this
machine that is about 50 µs per statement, a fifth of submitting one job on SQLite and a tenth on
PostgreSQL. The few per-job statements on those paths (one job's insert, SQLite's
``BEGIN IMMEDIATE``) are compiled here once instead, with their parameters converted by the same
type processors SQLAlchemy would use, and sent to the driver's cursor.

What stays the same: the statement runs on the connection (so in its transaction), a driver
error comes back as SQLAlchemy's exception class for it (``IntegrityError``, ``OperationalError``
…, with ``orig``), and a lost connection is invalidated. What does not: engine events such as
``before_cursor_execute`` do not see these statements, and rows come back as the driver made
them, without result processing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.engine.interfaces import DBAPICursor
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement


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
        self._sql = compiled.string
        #: Parameter names in order for a positional paramstyle (SQLite's ``?``), else None.
        self._positions: Sequence[str] | None = compiled.positiontup
        self._binds = dict(compiled.binds)
        self._processors: dict[str, Callable[[Any], Any] | None] = {
            # The dialect's own implementation of each type, as SQLAlchemy binds it (SQLite's
            # DATETIME writes text in its own format, for instance).
            key: bind.type.dialect_impl(dialect).bind_processor(dialect)
            for key, bind in self._binds.items()
        }

    def execute(self, conn: Connection, params: Mapping[str, Any]) -> list[Any]:
        """Run the statement in ``conn``'s transaction; return the rows it returned (raw)."""
        values: Sequence[Any] | dict[str, Any]
        if self._positions is None:
            values = {key: self._value(key, params) for key in self._binds}
        else:
            values = tuple(self._value(key, params) for key in self._positions)
        cursor: DBAPICursor = conn.connection.cursor()
        try:
            with translated_errors(conn, self._sql, values, cursor):
                cursor.execute(self._sql, values)
                return list(cursor.fetchall()) if cursor.description is not None else []
        finally:
            cursor.close()

    def _value(self, key: str, params: Mapping[str, Any]) -> Any:
        value = params[key] if key in params else self._binds[key].effective_value
        processor = self._processors[key]
        return value if processor is None else processor(value)


@contextmanager
def translated_errors(
    conn: Connection, statement: str, params: Any, cursor: DBAPICursor | None = None
) -> Iterator[None]:
    """Raise a driver error from inside as SQLAlchemy's exception for it, as
    ``conn.execute`` would (``orig`` is the driver's), and invalidate a lost connection."""
    dbapi_error: type[Exception] = conn.dialect.loaded_dbapi.Error
    try:
        yield
    except dbapi_error as exc:
        lost = conn.dialect.is_disconnect(
            exc,  # type: ignore[arg-type]  # the dialect's own DBAPI Error
            conn.connection.dbapi_connection,
            cursor,
        )
        if lost:
            conn.invalidate(exc)
        raise sa.exc.DBAPIError.instance(
            statement,
            params,
            exc,
            dbapi_error,
            connection_invalidated=lost,
            dialect=conn.dialect,
        ) from exc


_cache: dict[tuple[int, type[Dialect], tuple[str, ...] | None], DriverStatement] = {}


def driver_statement(
    stmt: ClauseElement, dialect: Dialect, column_keys: Sequence[str] | None = None
) -> DriverStatement:
    """``stmt`` compiled for ``dialect``, once per process (``stmt`` must live as long: a
    module constant or a cached property)."""
    keys = tuple(column_keys) if column_keys is not None else None
    key = (id(stmt), type(dialect), keys)
    found = _cache.get(key)
    if found is None:
        found = _cache[key] = DriverStatement(stmt, dialect, keys)
    return found
