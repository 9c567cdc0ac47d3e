"""named queues: a queue on every job, the claim index per queue, paused queues; refusals

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26 23:50:00.000000

On PostgreSQL (11 and later) adding a NOT NULL column with a constant default changes only the
catalogue: existing rows read the default without being rewritten, so ``ratchet_job`` of any
size is altered in a moment (the ALTER still waits for transactions using the table). The claim
index is built on the hot table, which holds only live jobs; the two partial indexes of
``ratchet_job`` get no entry for an existing job (every one is in the default queue, and failed
ones gain theirs), but building them reads the table once each, blocking writes to it meanwhile:
``python -m bench.migrate_queues`` measures the whole upgrade on a million jobs.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table_name in ('ratchet_job', 'ratchet_job_queue'):
        with op.batch_alter_table(table_name) as table:
            table.add_column(
                sa.Column(
                    'queue', sa.String(length=64), server_default='default', nullable=False
                )
            )
    with op.batch_alter_table('ratchet_job_queue') as table:
        table.add_column(sa.Column('refused_since', sa.DateTime(timezone=True), nullable=True))
        table.add_column(sa.Column('refused_by', sa.Text(), nullable=True))
    predicate = sa.text("status = 'PENDING'")
    op.create_index(
        'ix_ratchet_job_queue_queue_claim',
        'ratchet_job_queue',
        ['queue', 'priority', 'scheduled_time', 'job_id'],
        unique=False,
        postgresql_where=predicate,
        sqlite_where=predicate,
    )
    named = sa.text("queue <> 'default'")
    op.create_index(
        'ix_ratchet_job_named_queue',
        'ratchet_job',
        ['queue', 'job_id'],
        unique=False,
        postgresql_where=named,
        sqlite_where=named,
    )
    failed = sa.text("terminal_status = 'FAILED'")
    op.create_index(
        'ix_ratchet_job_failed_queue',
        'ratchet_job',
        ['queue', 'job_id'],
        unique=False,
        postgresql_where=failed,
        sqlite_where=failed,
    )
    op.create_table(
        'ratchet_queue',
        sa.Column('name', sa.String(length=64), nullable=False),
        sa.Column('paused', sa.Boolean(), nullable=False),
        sa.Column('changed_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('changed_by', sa.String(length=255), nullable=True),
        sa.PrimaryKeyConstraint('name', name=op.f('pk_ratchet_queue')),
    )


def downgrade() -> None:
    op.drop_table('ratchet_queue')
    op.drop_index('ix_ratchet_job_queue_queue_claim', table_name='ratchet_job_queue')
    op.drop_index('ix_ratchet_job_failed_queue', table_name='ratchet_job')
    op.drop_index('ix_ratchet_job_named_queue', table_name='ratchet_job')
    with op.batch_alter_table('ratchet_job_queue') as table:
        table.drop_column('refused_by')
        table.drop_column('refused_since')
    for table_name in ('ratchet_job_queue', 'ratchet_job'):
        with op.batch_alter_table(table_name) as table:
            table.drop_column('queue')
