"""batches, workflow conditions, resource limits and permits; job links to them

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26 05:10:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('ratchet_job') as table:
        table.add_column(sa.Column('batch_id', sa.Uuid(), nullable=True))
        table.add_column(
            sa.Column('follow_up', sa.Boolean(), server_default=sa.false(), nullable=False)
        )
        table.add_column(sa.Column('callbacks', sa.Text(), nullable=True))
    predicate = sa.text('batch_id IS NOT NULL')
    op.create_index(
        op.f('ix_ratchet_job_batch_id_job_id'),
        'ratchet_job',
        ['batch_id', 'job_id'],
        unique=False,
        postgresql_where=predicate,
        sqlite_where=predicate,
    )
    op.create_table(
        'ratchet_batch',
        sa.Column('batch_id', sa.Uuid(), nullable=False),
        sa.Column('name', sa.String(length=255), nullable=False),
        sa.Column('total', sa.Integer(), nullable=False),
        sa.Column('succeeded', sa.Integer(), nullable=False),
        sa.Column('failed', sa.Integer(), nullable=False),
        sa.Column('child_run_ms', sa.Float(), nullable=False),
        sa.Column('child_wait_ms', sa.Float(), nullable=False),
        sa.Column('progress_task', sa.String(length=255), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ['batch_id'],
            ['ratchet_job.job_id'],
            name=op.f('fk_ratchet_batch_batch_id_ratchet_job'),
            ondelete='CASCADE',
        ),
        sa.PrimaryKeyConstraint('batch_id', name=op.f('pk_ratchet_batch')),
    )
    op.create_index(
        op.f('ix_ratchet_batch_created_at'), 'ratchet_batch', ['created_at'], unique=False
    )
    op.create_table(
        'ratchet_workflow_condition',
        sa.Column('job_id', sa.Uuid(), nullable=False),
        sa.Column('parent_id', sa.Uuid(), nullable=False),
        sa.Column('kind', sa.String(length=16), nullable=False),
        sa.Column('predicate', sa.String(length=255), nullable=True),
        sa.Column('threshold', sa.Float(), nullable=True),
        sa.Column('decision', sa.String(length=16), nullable=True),
        sa.Column('error', sa.Text(), nullable=True),
        sa.Column('decided_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ['job_id'],
            ['ratchet_job.job_id'],
            name=op.f('fk_ratchet_workflow_condition_job_id_ratchet_job'),
            ondelete='CASCADE',
        ),
        sa.PrimaryKeyConstraint('job_id', name=op.f('pk_ratchet_workflow_condition')),
    )
    op.create_index(
        op.f('ix_ratchet_workflow_condition_parent_id'),
        'ratchet_workflow_condition',
        ['parent_id'],
        unique=False,
    )
    op.create_table(
        'ratchet_resource_limit',
        sa.Column('resource_name', sa.String(length=100), nullable=False),
        sa.Column('max_concurrent', sa.Integer(), nullable=False),
        sa.Column('retry_delay', sa.Float(), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('resource_name', name=op.f('pk_ratchet_resource_limit')),
    )
    op.create_table(
        'ratchet_resource_permit',
        sa.Column('job_id', sa.Uuid(), nullable=False),
        sa.Column('resource_name', sa.String(length=100), nullable=False),
        sa.Column('node_id', sa.String(length=64), nullable=False),
        sa.Column('acquired_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('job_id', name=op.f('pk_ratchet_resource_permit')),
    )
    op.create_index(
        op.f('ix_ratchet_resource_permit_resource_name'),
        'ratchet_resource_permit',
        ['resource_name'],
        unique=False,
    )
    op.create_index(
        op.f('ix_ratchet_resource_permit_node_id'),
        'ratchet_resource_permit',
        ['node_id'],
        unique=False,
    )


def downgrade() -> None:
    op.drop_table('ratchet_resource_permit')
    op.drop_table('ratchet_resource_limit')
    op.drop_table('ratchet_workflow_condition')
    op.drop_table('ratchet_batch')
    op.drop_index(op.f('ix_ratchet_job_batch_id_job_id'), table_name='ratchet_job')
    with op.batch_alter_table('ratchet_job') as table:
        table.drop_column('callbacks')
        table.drop_column('follow_up')
        table.drop_column('batch_id')
