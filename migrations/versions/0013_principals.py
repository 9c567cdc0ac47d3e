"""principals: who submitted each job

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02 09:00:00.000000

One nullable column on the cold row, without a default (on PostgreSQL a catalogue change only),
and an index of the jobs that have one, newest first per principal (``find_jobs(principal=…)``
and the console's filter); a job submitted without a principal is written to no index.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('ratchet_job') as table:
        table.add_column(sa.Column('principal', sa.String(length=255), nullable=True))
    named = sa.text('principal IS NOT NULL')
    op.create_index(
        'ix_ratchet_job_principal_job_id',
        'ratchet_job',
        ['principal', 'job_id'],
        unique=False,
        postgresql_where=named,
        sqlite_where=named,
    )


def downgrade() -> None:
    op.drop_index('ix_ratchet_job_principal_job_id', table_name='ratchet_job')
    with op.batch_alter_table('ratchet_job') as table:
        table.drop_column('principal')
