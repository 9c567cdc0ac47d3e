"""when a running attempt started: claimed jobs waiting for a worker thread told apart

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28 09:00:00.000000

A nullable column without a default on the hot row: on PostgreSQL a catalogue change only (no
row is rewritten); existing rows read NULL, an attempt not known to have started. Nothing
searches by it alone (the console reads it with the RUNNING rows the status index finds), so
it has no index: the claim and the completion, which write this table, pay for none.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('ratchet_job_queue') as table:
        table.add_column(sa.Column('started_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('ratchet_job_queue') as table:
        table.drop_column('started_at')
