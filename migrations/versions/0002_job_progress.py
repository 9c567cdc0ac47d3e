"""job progress

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-25 23:12:14.826049
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('ratchet_job', schema=None) as batch_op:
        batch_op.add_column(sa.Column('progress', sa.Text(), nullable=True))

    with op.batch_alter_table('ratchet_job_queue', schema=None) as batch_op:
        batch_op.add_column(sa.Column('progress', sa.Text(), nullable=True))



def downgrade() -> None:
    with op.batch_alter_table('ratchet_job_queue', schema=None) as batch_op:
        batch_op.drop_column('progress')

    with op.batch_alter_table('ratchet_job', schema=None) as batch_op:
        batch_op.drop_column('progress')

