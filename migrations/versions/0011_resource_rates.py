"""resource rates: at most N starts of a resource in any period, and its log of starts

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-30 09:00:00.000000

``ratchet_resource_limit`` gains the rate (two nullable columns: existing limits have none) and
``max_concurrent`` may be NULL (a resource with a rate only). ``ratchet_resource_start`` holds
the starts inside each rate's current window; it is small (at most a rate's count per
resource) and its primary key is the index its reads take.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('ratchet_resource_limit') as table:
        table.alter_column('max_concurrent', existing_type=sa.Integer(), nullable=True)
        table.add_column(sa.Column('rate_count', sa.Integer(), nullable=True))
        table.add_column(sa.Column('rate_period', sa.Float(), nullable=True))
    op.create_table(
        'ratchet_resource_start',
        sa.Column('resource_name', sa.String(length=100), nullable=False),
        sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('job_id', sa.Uuid(), nullable=False),
        sa.PrimaryKeyConstraint(
            'resource_name', 'started_at', 'job_id', name=op.f('pk_ratchet_resource_start')
        ),
    )


def downgrade() -> None:
    op.drop_table('ratchet_resource_start')
    # A limit with a rate only has no place in the older table.
    op.execute(sa.text('DELETE FROM ratchet_resource_limit WHERE max_concurrent IS NULL'))
    with op.batch_alter_table('ratchet_resource_limit') as table:
        table.drop_column('rate_period')
        table.drop_column('rate_count')
        table.alter_column('max_concurrent', existing_type=sa.Integer(), nullable=False)
