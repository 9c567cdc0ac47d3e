"""console audit table and the console's filter indexes

Revision ID: 0004
Revises: 0002
Create Date: 2026-11-26 02:15:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'ratchet_audit',
        sa.Column('audit_id', sa.Uuid(), nullable=False),
        sa.Column('at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('actor', sa.String(length=255), nullable=False),
        sa.Column('role', sa.String(length=16), nullable=False),
        sa.Column('action', sa.String(length=32), nullable=False),
        sa.Column('scope', sa.String(length=16), nullable=False),
        sa.Column('target', sa.Text(), nullable=False),
        sa.Column('requested', sa.Integer(), nullable=False),
        sa.Column('changed', sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint('audit_id', name=op.f('pk_ratchet_audit')),
    )
    op.create_index(op.f('ix_ratchet_audit_at'), 'ratchet_audit', ['at'], unique=False)
    op.create_index(
        op.f('ix_ratchet_job_terminal_status_job_id'),
        'ratchet_job',
        ['terminal_status', 'job_id'],
        unique=False,
        postgresql_where=sa.text('terminal_status IS NOT NULL'),
        sqlite_where=sa.text('terminal_status IS NOT NULL'),
    )
    # Jobs of the default priority (NORMAL, 2) are left out: they are most of them, and the
    # console finds them on the primary key.
    op.create_index(
        op.f('ix_ratchet_job_priority_job_id'),
        'ratchet_job',
        ['priority', 'job_id'],
        unique=False,
        postgresql_where=sa.text('priority <> 2'),
        sqlite_where=sa.text('priority <> 2'),
    )
    # Only PENDING rows: RUNNING and PAUSED ones are few and reached by (status, picked_at, …).
    op.create_index(
        'ix_ratchet_job_queue_pending',
        'ratchet_job_queue',
        ['job_id'],
        unique=False,
        postgresql_where=sa.text("status = 'PENDING'"),
        sqlite_where=sa.text("status = 'PENDING'"),
    )


def downgrade() -> None:
    op.drop_index('ix_ratchet_job_queue_pending', table_name='ratchet_job_queue')
    op.drop_index(op.f('ix_ratchet_job_priority_job_id'), table_name='ratchet_job')
    op.drop_index(op.f('ix_ratchet_job_terminal_status_job_id'), table_name='ratchet_job')
    op.drop_index(op.f('ix_ratchet_audit_at'), table_name='ratchet_audit')
    op.drop_table('ratchet_audit')
