"""signals: jobs that await a signal (WAITING), their key, wait and delivered payload

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01 09:00:00.000000

Three nullable columns on the cold row, without defaults (on PostgreSQL a catalogue change
only); an index of the keys, only where one is set, for a delivery by key; and an index of the
WAITING hot rows in deadline order, for the timeout scan (its cost does not grow with the
other jobs, nor with the waits that have not timed out).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('ratchet_job') as table:
        table.add_column(sa.Column('signal_key', sa.String(length=255), nullable=True))
        table.add_column(sa.Column('signal_timeout', sa.Float(), nullable=True))
        table.add_column(sa.Column('signal_payload', sa.Text(), nullable=True))
    keyed = sa.text('signal_key IS NOT NULL')
    op.create_index(
        'ix_ratchet_job_signal_key_job_id',
        'ratchet_job',
        ['signal_key', 'job_id'],
        unique=False,
        postgresql_where=keyed,
        sqlite_where=keyed,
    )
    waiting = sa.text("status = 'WAITING'")
    op.create_index(
        'ix_ratchet_job_queue_waiting',
        'ratchet_job_queue',
        ['scheduled_time', 'job_id'],
        unique=False,
        postgresql_where=waiting,
        sqlite_where=waiting,
    )


def downgrade() -> None:
    op.drop_index('ix_ratchet_job_queue_waiting', table_name='ratchet_job_queue')
    op.drop_index('ix_ratchet_job_signal_key_job_id', table_name='ratchet_job')
    with op.batch_alter_table('ratchet_job') as table:
        table.drop_column('signal_payload')
        table.drop_column('signal_timeout')
        table.drop_column('signal_key')
