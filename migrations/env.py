"""Alembic environment for flask-ratchet's own tables.

Run through ``flask ratchet db …`` (or :mod:`flask_ratchet.migrate`), which passes the connection.
Versions live in ``ratchet_alembic_version`` and only ``ratchet_*`` objects are considered, so a
host app's own alembic or Flask-Migrate history is never read or written.
"""

from __future__ import annotations

from alembic import context

from flask_ratchet.migrate import include_object
from flask_ratchet.migrate_mysql import adapt
from flask_ratchet.schema import VERSION_TABLE, metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError(
        "run flask-ratchet migrations with 'flask ratchet db upgrade', not the alembic command"
    )
context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table=VERSION_TABLE,
    include_object=include_object,
    render_as_batch=True,  # SQLite alters tables by copying them
    compare_type=True,
)
adapt(context.get_context())  # MariaDB and MySQL: see flask_ratchet/migrate_mysql.py
with context.begin_transaction():
    context.run_migrations()
