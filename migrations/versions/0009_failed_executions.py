"""failed executions by start: the overview's chart counts a window's failed runs on them

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27 08:00:00.000000

An index of only the FAILED rows of ``ratchet_execution`` (a run's row is written once, when it
ends, so a successful run never touches it). The chart counts every run of a bar on the
``started_at`` index alone and the failed ones here, instead of reading each row of the window
for its status.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None

NAME = 'ix_ratchet_execution_failed_started_at'


def upgrade() -> None:
    failed = sa.text("status = 'FAILED'")
    op.create_index(
        NAME,
        'ratchet_execution',
        # status too, though it is always FAILED: SQLite counts from the index alone only when
        # it holds every column the query names.
        ['started_at', 'status'],
        unique=False,
        postgresql_where=failed,
        sqlite_where=failed,
    )


def downgrade() -> None:
    op.drop_index(NAME, table_name='ratchet_execution')
