"""What differs in the ``ratchet_*`` tables' DDL per database: MariaDB and MySQL have no
partial indexes and take their storage engine, character set and collation from the server
unless told. :func:`metadata_for` is :data:`flask_ratchet.schema.metadata` as each database
has it; the migrations build the same (``migrate_mysql.py``)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

from .columns import MYSQL_NAMES, is_mysql
from .schema import NAMING, metadata

_EQUALITY = re.compile(r"(\w+) = '")


def index_columns(dialect: Dialect, columns: Sequence[str], where: str | None) -> list[str]:
    """The columns of an index of the rows where ``where`` holds, as ``dialect`` builds it.

    MariaDB and MySQL have no partial indexes: there the index holds every row, and where the
    condition is an equality (``status = 'PENDING'``) its column leads, so that the rows the
    condition selects are still one range of the index (the claim reads PENDING rows only, in
    due order, whatever else the table holds)."""
    lead = _EQUALITY.match(where or "")
    if lead is None or not is_mysql(dialect):
        return list(columns)
    return [lead.group(1), *(c for c in columns if c != lead.group(1))]


def table_options(dialect: Dialect) -> dict[str, str]:
    """``CREATE TABLE`` options for ``dialect``, never taken from the server's defaults.

    On MariaDB and MySQL: InnoDB, ``utf8mb4`` and a binary collation without padding, so that
    keys differing in case, accents or trailing spaces are distinct, as they are on PostgreSQL
    and SQLite (``utf8mb4_bin`` still pads: ``'k'`` equals ``'k '``)."""
    if not is_mysql(dialect):
        return {}
    collation = "utf8mb4_nopad_bin" if dialect.is_mariadb else "utf8mb4_0900_bin"  # type: ignore[attr-defined]
    options = {"engine": "InnoDB", "charset": "utf8mb4", "collate": collation}
    return {f"{prefix}_{k}": v for prefix in MYSQL_NAMES for k, v in options.items()}


def metadata_for(dialect: Dialect) -> sa.MetaData:
    """ratchet's tables as they are on ``dialect``'s database: :data:`metadata` itself, or on
    MariaDB and MySQL a copy whose partial indexes are built by :func:`index_columns`."""
    if not is_mysql(dialect):
        return metadata
    copy = sa.MetaData(naming_convention=NAMING)
    for table in metadata.sorted_tables:
        moved = table.to_metadata(copy)
        wheres = {index.name: index.info.get("where") for index in table.indexes}
        for index in list(moved.indexes):
            columns = [c.name for c in index.columns]
            wanted = index_columns(dialect, columns, wheres.get(index.name))
            if wanted != columns:
                moved.indexes.discard(index)
                sa.Index(index.name, *(moved.c[name] for name in wanted), unique=index.unique)
    return copy
