"""each run's queue: the queues page counts the last hour's runs by queue from them alone

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03 09:00:00.000000

A run's queue is copied to its ``ratchet_execution`` row (nullable, without a default: on
PostgreSQL a catalogue change only; rows written before it are read through their job), so that
the runs of the last hour are counted by queue in one read of that hour's rows, without reading
a million jobs for their queue.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('ratchet_execution') as table:
        table.add_column(sa.Column('queue', sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('ratchet_execution') as table:
        table.drop_column('queue')
