"""trace context: the W3C trace context a job was submitted in, for its runs' spans

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-28 10:00:00.000000

A nullable column without a default: on PostgreSQL adding it changes only the catalogue (no row
is rewritten), so ``ratchet_job`` of any size is altered in a moment; existing jobs read NULL,
as jobs submitted while nothing traces do.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('ratchet_job') as table:
        table.add_column(sa.Column('trace_context', sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('ratchet_job') as table:
        table.drop_column('trace_context')
