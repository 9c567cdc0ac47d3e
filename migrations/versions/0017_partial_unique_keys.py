"""idempotency keys and recurring fire times unique where set: a job without either is written
without an entry in their indexes

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-28 22:30:00.000000

Most jobs have neither an idempotency key nor a recurring master, yet each one wrote a NULL
entry into both unique indexes (PostgreSQL and SQLite index NULLs): two of the pages a SQLite
submission commits, two of the entries a PostgreSQL one writes. Each constraint becomes a
unique index of the same name over the rows where it is set, which refuses the same rows.

- PostgreSQL: the constraint is dropped and the index built, in the upgrade's one transaction
  (the table is locked while the index is built: seconds per million jobs).
- SQLite: a table's own UNIQUE constraint can only go with the table, so ``ratchet_job`` is
  copied into a new one (alembic's batch mode: its other indexes are created again as they
  were), then the indexes are built.
- MariaDB and MySQL have no partial indexes: the unique keys stay as they are (under the same
  names), and NULLs never collide there either.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None

#: (name, columns, the column whose rows it holds)
KEYS = [
    ('uq_ratchet_job_idempotency_key', ['idempotency_key'], 'idempotency_key'),
    ('uq_ratchet_job_recurring_id_fire_time', ['recurring_id', 'fire_time'], 'recurring_id'),
]


def _partial() -> bool:
    return op.get_bind().dialect.name in ('postgresql', 'sqlite')


def upgrade() -> None:
    if not _partial():
        return
    with op.batch_alter_table('ratchet_job') as table:
        for name, _, _ in KEYS:
            table.drop_constraint(name, type_='unique')
    for name, columns, where in KEYS:
        predicate = sa.text(f'{where} IS NOT NULL')
        op.create_index(
            name,
            'ratchet_job',
            columns,
            unique=True,
            postgresql_where=predicate,
            sqlite_where=predicate,
        )


def downgrade() -> None:
    if not _partial():
        return
    for name, _, _ in KEYS:
        op.drop_index(name, table_name='ratchet_job')
    with op.batch_alter_table('ratchet_job') as table:
        for name, columns, _ in KEYS:
            table.create_unique_constraint(name, columns)
