"""The column types of ratchet's tables, and how each database stores them.

=================  =======================  ===================  ==============================
type               PostgreSQL               SQLite               MariaDB / MySQL
=================  =======================  ===================  ==============================
:class:`UtcDateTime`  ``timestamptz``       naive UTC text       ``DATETIME(6)``, naive UTC
:class:`StoredUuid`   ``uuid``              32 hex digits        ``BINARY(16)`` (byte order is
                                                                 UUIDv7's time order)
:data:`LONG_TEXT`     ``text``              ``TEXT``             ``LONGTEXT`` (``TEXT`` holds
                                                                 64 KB)
:data:`DOUBLE`        ``float8``            ``REAL``             ``DOUBLE`` (``FLOAT`` is 4
                                                                 bytes there)
=================  =======================  ===================  ==============================

Every stored value is read defensively: a row written by hand that holds something the column
should not (text that is not a time or an id, a time Python cannot hold) reads as a marked
value instead of failing every query that reads the row (a claim, a page, retention).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.types import TypeEngine

from .states import JobStatus

#: The dialect names of MariaDB and MySQL (``mysql+pymysql://`` reaching a MariaDB server is
#: ``mysql``; ``mariadb+pymysql://`` is ``mariadb``).
MYSQL_NAMES = frozenset({"mysql", "mariadb"})


def is_mysql(dialect: Dialect) -> bool:
    """Whether ``dialect`` talks to MariaDB or MySQL."""
    return dialect.name in MYSQL_NAMES


def _on_mysql(generic: TypeEngine[Any], there: TypeEngine[Any]) -> TypeEngine[Any]:
    return generic.with_variant(there, "mysql").with_variant(there, "mariadb")


#: Free text of any length ratchet writes (payloads up to ``RATCHET_MAX_PAYLOAD_BYTES``,
#: errors, tracebacks, results): ``LONGTEXT`` on MariaDB and MySQL, whose ``TEXT`` holds 64 KB.
LONG_TEXT: TypeEngine[str] = _on_mysql(sa.Text(), mysql.LONGTEXT())
#: A float of 8 bytes everywhere: MariaDB's and MySQL's ``FLOAT`` has 4.
DOUBLE: TypeEngine[float] = _on_mysql(sa.Float(), mysql.DOUBLE(asdecimal=False))

#: What a stored time outside Python's range reads as: PostgreSQL holds years from 4713 BC to
#: 294276 and ``infinity``, SQLite any text, MariaDB a zero date. The earliest is a day inside
#: Python's range, so it is a ``datetime`` in any session time zone psycopg converts it to; the
#: latest is the last second of 9999, at or after :data:`flask_ratchet.flows.NOT_YET` (a step's
#: due time), which must read back as it was written.
EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
LATEST = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)


class Representable(FunctionElement[datetime]):
    """A stored time, held within ``EARLIEST``..``LATEST`` as it is read (PostgreSQL): psycopg
    cannot load a time outside Python's range, and one such row would fail every read of it."""

    name = "representable"
    inherit_cache = True

    def __init__(self, time: ColumnElement[datetime]) -> None:
        super().__init__(time)
        self.type = time.type


@compiles(Representable)
def _representable_as_is(element: Representable, compiler: SQLCompiler, **kw: Any) -> str:
    # SQLite and MariaDB: see UtcDateTime.result_processor.
    return str(compiler.process(element.clauses, **kw))


@compiles(Representable, "postgresql")
def _representable_postgresql(element: Representable, compiler: SQLCompiler, **kw: Any) -> str:
    inner = compiler.process(element.clauses, **kw)
    earliest, latest = (
        f"TIMESTAMPTZ '{EARLIEST.isoformat()}'",
        f"TIMESTAMPTZ '{LATEST.isoformat()}'",
    )
    # Not GREATEST/LEAST: they skip NULLs, and NULL must stay NULL.
    return (
        f"CASE WHEN {inner} < {earliest} THEN {earliest} "
        f"WHEN {inner} > {latest} THEN {latest} ELSE {inner} END"
    )


class UtcDateTime(sa.TypeDecorator[datetime]):
    """A timestamp that is always an aware UTC ``datetime`` in Python.

    PostgreSQL stores ``timestamptz``; SQLite naive UTC text, which sorts in time order; MariaDB
    and MySQL a naive UTC ``DATETIME(6)``, which no session ``time_zone`` converts (a
    ``TIMESTAMP`` would be, and ends in 2038). Every stored value is read as a ``datetime``: one
    Python cannot hold, or text SQLite holds that is not a time, or MariaDB's zero date, reads
    as ``EARLIEST`` or ``LATEST`` (a row written by hand must not make every page that lists it
    fail).
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if is_mysql(dialect):
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(self.impl_instance)

    def column_expression(self, colexpr: ColumnElement[Any]) -> ColumnElement[datetime]:
        return Representable(colexpr)

    def result_processor(
        self, dialect: Dialect, coltype: object
    ) -> Callable[[Any], datetime | None] | None:
        process = super().result_processor(dialect, coltype)
        if process is None or dialect.name == "postgresql":
            return process
        parse = process

        def tolerant(value: Any) -> datetime | None:
            try:
                return parse(value)
            except (ValueError, TypeError, OverflowError):
                return _nearest_end(value)

        return tolerant

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        if dialect.name != "sqlite":
            return super().bind_processor(dialect)

        # SQLite's text, written in one call: SQLAlchemy's DATETIME formats the fields one by
        # one (a few microseconds a value, on the path of every submission). The same text:
        # "YYYY-MM-DD HH:MM:SS.ffffff", which sorts in time order.
        def sqlite_text(value: datetime | None) -> str | None:
            if value is None:
                return None
            return _utc(value).replace(tzinfo=None).isoformat(" ", "microseconds")

        return sqlite_text

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = _utc(value)
        return value if dialect.name == "postgresql" else value.replace(tzinfo=None)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, bytes):  # a MariaDB expression the driver did not type
            value = value.decode()
        if isinstance(value, str):  # raw text from an untyped expression (SQLite, MariaDB)
            value = datetime.fromisoformat(value)
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)  # type: ignore[no-any-return]
        return value.astimezone(UTC)  # type: ignore[no-any-return]


def _utc(value: datetime) -> datetime:
    """``value`` in UTC; a naive one is refused (its zone is unknown)."""
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}: pass an aware datetime (e.g. tzinfo=UTC)")
    return value.astimezone(UTC)


def _nearest_end(text: Any) -> datetime:
    """The end of Python's range nearest to a stored time it cannot hold: years past 9999 (more
    than four digits) are late, anything else (a year 0, a negative year, not a time) early."""
    year = str(text).split("-", 1)[0]
    return LATEST if year.isdigit() and len(year) > 4 else EARLIEST


#: What an id column reads as when it holds something that is not a UUID (written by hand: text
#: on SQLite, bytes of another length on MariaDB): the nil UUID, which ratchet never writes
#: (its ids are UUIDv7).
UNREADABLE_ID = uuid.UUID(int=0)


class StoredUuid(sa.TypeDecorator[uuid.UUID]):
    """A UUID column read defensively. PostgreSQL's ``uuid`` type holds nothing else; SQLite
    stores text; MariaDB and MySQL ``BINARY(16)``, the UUID's bytes, whose order is a UUIDv7's
    time order (MariaDB's own ``UUID`` type reorders a UUID's groups before comparing, so
    ``ORDER BY job_id`` would not be creation order there). A stored value that is not a UUID
    reads as :data:`UNREADABLE_ID` instead of failing every query that reads the row."""

    impl = sa.Uuid()
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if is_mysql(dialect):
            return dialect.type_descriptor(mysql.BINARY(16))
        return dialect.type_descriptor(self.impl_instance)

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        if not is_mysql(dialect):
            return super().bind_processor(dialect)

        def to_bytes(value: Any) -> bytes | None:
            if value is None:
                return None
            return (value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))).bytes

        return to_bytes

    def result_processor(
        self, dialect: Dialect, coltype: object
    ) -> Callable[[Any], uuid.UUID | None] | None:
        if is_mysql(dialect):
            return _uuid_from_bytes
        process = super().result_processor(dialect, coltype)
        if process is None or dialect.supports_native_uuid:
            return process
        parse = process

        def tolerant(value: Any) -> uuid.UUID | None:
            try:
                return parse(value)
            except (ValueError, TypeError, AttributeError):
                return UNREADABLE_ID

        return tolerant


def _uuid_from_bytes(value: Any) -> uuid.UUID | None:
    if value is None:
        return None
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(bytes=bytes(value))
    except (ValueError, TypeError):
        return UNREADABLE_ID


def const(value: JobStatus | int) -> Any:
    """A status or priority written into the SQL text rather than bound.

    The partial indexes (``status = 'PENDING'``, ``priority <> 2``) are usable only where
    PostgreSQL can prove the predicate from the query text; a bound parameter would do only
    while the driver's statement is not yet prepared with a generic plan. Safe: the value is a
    member of an enum (or a validated priority level), never request text.
    """
    if isinstance(value, JobStatus):
        return sa.literal_column(f"'{value.value}'", sa.String)
    return sa.literal_column(str(int(value)), sa.SmallInteger)


def aware(value: Any) -> datetime:
    """A timestamp read back from the database (a string, or naive, on SQLite) in UTC."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    assert isinstance(value, datetime)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
