"""job expiry: the time a job must have started by, or it is canceled ("expired")

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-29 09:00:00.000000

A nullable column without a default, on the cold row: on PostgreSQL adding it changes only the
catalogue (no row is rewritten), so ``ratchet_job`` of any size is altered in a moment; existing
jobs read NULL, a job without a deadline. The claim reads it with the cold row it already joins
for the payload, and nothing searches by it, so it has no index.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('ratchet_job') as table:
        table.add_column(sa.Column('expires_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('ratchet_job') as table:
        table.drop_column('expires_at')
