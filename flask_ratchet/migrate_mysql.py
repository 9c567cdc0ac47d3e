"""ratchet's migrations on MariaDB and MySQL: one history for every database.

The revisions in ``migrations/versions`` are written once, in SQLAlchemy's generic types; on
MariaDB and MySQL, :func:`adapt` gives their migration context an implementation that builds
what they describe the way those databases need it:

- every table InnoDB, ``utf8mb4`` with a binary collation without padding
  (:func:`flask_ratchet.schema_ddl.table_options`), the version table too;
- each generic type as :mod:`flask_ratchet.columns` stores it there (``BINARY(16)`` ids,
  ``DATETIME(6)`` times, ``LONGTEXT``, ``DOUBLE``);
- a partial index as :func:`flask_ratchet.schema_ddl.index_columns` builds it;
- every step re-runnable: their DDL is not transactional (each statement commits), so a
  revision interrupted halfway left some of its steps done. Run again, a step whose work is
  there (a table, an index, a column) is skipped, and a drop of what is gone too;
- an index a foreign key needs is not dropped (MariaDB refuses): downgrades drop such an
  index only before dropping its table.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic.ddl.mysql import MariaDBImpl, MySQLImpl
from alembic.runtime.migration import MigrationContext

from .columns import DOUBLE, LONG_TEXT, StoredUuid, UtcDateTime, is_mysql
from .schema_ddl import index_columns, table_options

#: MariaDB's error for dropping an index a foreign key needs.
_NEEDED_BY_FOREIGN_KEY = 1553


def adapt(context: MigrationContext) -> None:
    """On MariaDB and MySQL, give ``context`` the implementation this module describes (its
    version table's options included); elsewhere, change nothing."""
    impl = context.impl
    if not is_mysql(impl.dialect) or isinstance(impl, _Rerunnable):
        return
    base = MariaDBImpl if isinstance(impl, MariaDBImpl) else MySQLImpl
    # Made with type(): a class statement naming __dialect__ would register it as alembic's
    # implementation for every migration in the process, the host app's own included.
    cls = type(f"Ratchet{base.__name__}", (_Rerunnable, base), {})
    context.impl = cls(
        impl.dialect,
        impl.connection,
        impl.as_sql,
        impl.transactional_ddl,
        impl.output_buffer,
        impl.context_opts,
    )
    context._version.dialect_kwargs.update(table_options(impl.dialect))


def _stored(column: sa.Column[Any]) -> sa.Column[Any]:
    """``column`` with its generic type replaced by ratchet's type for it."""
    kind = column.type
    if isinstance(kind, sa.Uuid):
        column.type = StoredUuid()
    elif isinstance(kind, sa.DateTime):
        column.type = UtcDateTime()
    elif isinstance(kind, sa.Text):
        column.type = LONG_TEXT
    elif isinstance(kind, sa.Float):
        column.type = DOUBLE
    return column


class _Rerunnable(MySQLImpl):
    """See the module's docstring."""

    def _inspector(self) -> sa.Inspector:
        assert self.connection is not None
        return sa.inspect(self.connection)

    def _has_index(self, table: str, name: str | None) -> bool:
        inspector = self._inspector()
        if not inspector.has_table(table):
            return False
        return any(found["name"] == name for found in inspector.get_indexes(table))

    def _has_column(self, table: str, name: str) -> bool:
        return any(found["name"] == name for found in self._inspector().get_columns(table))

    def create_table(self, table: sa.Table, **kw: Any) -> None:
        if self._inspector().has_table(table.name):
            return
        for column in table.columns:
            _stored(column)
        table.dialect_kwargs.update(table_options(self.dialect))
        super().create_table(table, **kw)

    def drop_table(self, table: sa.Table, **kw: Any) -> None:
        if self._inspector().has_table(table.name):
            super().drop_table(table, **kw)

    def create_index(self, index: sa.Index, **kw: Any) -> None:
        assert index.table is not None
        if self._has_index(index.table.name, index.name):
            return
        where = index.dialect_options["postgresql"]["where"]
        columns = [c.name for c in index.columns]
        wanted = index_columns(self.dialect, columns, None if where is None else str(where))
        if wanted != columns:
            table = sa.Table(index.table.name, sa.MetaData(), *(sa.Column(c) for c in wanted))
            index = sa.Index(index.name, *(table.c[c] for c in wanted), unique=index.unique)
        super().create_index(index, **kw)

    def drop_index(self, index: sa.Index, **kw: Any) -> None:
        assert index.table is not None
        if not self._has_index(index.table.name, index.name):
            return
        try:
            super().drop_index(index, **kw)
        except sa.exc.OperationalError as exc:
            # A foreign key needs it (MariaDB indexes every foreign key): it goes with its
            # table, which the downgrade drops next.
            if getattr(exc.orig, "args", (None,))[0] != _NEEDED_BY_FOREIGN_KEY:
                raise

    def add_column(self, table_name: str, column: sa.Column[Any], **kw: Any) -> None:
        if not self._has_column(table_name, column.name):
            super().add_column(table_name, _stored(column), **kw)

    def drop_column(self, table_name: str, column: sa.Column[Any], **kw: Any) -> None:
        if self._has_column(table_name, column.name):
            super().drop_column(table_name, column, **kw)
