"""ratchet_job's mostly-NULL columns indexed only where they are set; recurring children;
failed jobs by task

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26 02:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None

# (index name, columns, the column that must not be NULL)
INDEXES = [
    ('ix_ratchet_job_business_key', ['business_key'], 'business_key'),
    ('ix_ratchet_job_depends_on', ['depends_on'], 'depends_on'),
    ('ix_ratchet_job_superseded_by', ['superseded_by'], 'superseded_by'),
    (
        'ix_ratchet_job_terminal_status_finished_at',
        ['terminal_status', 'finished_at'],
        'terminal_status',
    ),
]


CHILDREN = 'ix_ratchet_job_recurring_id_job_id'
FAILED_BY_TASK = 'ix_ratchet_job_failed_task_job_id'


def upgrade() -> None:
    predicate = sa.text('recurring_id IS NOT NULL')
    op.create_index(
        CHILDREN,
        'ratchet_job',
        ['recurring_id', 'job_id'],
        unique=False,
        postgresql_where=predicate,
        sqlite_where=predicate,
    )
    failed = sa.text("terminal_status = 'FAILED'")
    op.create_index(
        FAILED_BY_TASK,
        'ratchet_job',
        ['task', 'job_id'],
        unique=False,
        postgresql_where=failed,
        sqlite_where=failed,
    )
    for name, columns, where in INDEXES:
        op.drop_index(name, table_name='ratchet_job')
        predicate = sa.text(f'{where} IS NOT NULL')
        op.create_index(
            name,
            'ratchet_job',
            columns,
            unique=False,
            postgresql_where=predicate,
            sqlite_where=predicate,
        )


def downgrade() -> None:
    op.drop_index(CHILDREN, table_name='ratchet_job')
    op.drop_index(FAILED_BY_TASK, table_name='ratchet_job')
    for name, columns, _ in INDEXES:
        op.drop_index(name, table_name='ratchet_job')
        op.create_index(name, 'ratchet_job', columns, unique=False)
