"""initial tables

Revision ID: 0001
Revises:
Create Date: 2026-11-25 22:55:36.944584
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('ratchet_job',
    sa.Column('job_id', sa.Uuid(), nullable=False),
    sa.Column('task', sa.String(length=255), nullable=False),
    sa.Column('job_type', sa.String(length=16), nullable=False),
    sa.Column('priority', sa.SmallInteger(), nullable=False),
    sa.Column('payload', sa.Text(), nullable=False),
    sa.Column('params', sa.Text(), nullable=True),
    sa.Column('max_retries', sa.Integer(), nullable=False),
    sa.Column('backoff', sa.String(length=16), nullable=False),
    sa.Column('backoff_base', sa.Float(), nullable=False),
    sa.Column('timeout', sa.Float(), nullable=True),
    sa.Column('resource_name', sa.String(length=100), nullable=True),
    sa.Column('idempotency_key', sa.String(length=255), nullable=True),
    sa.Column('business_key', sa.String(length=255), nullable=True),
    sa.Column('depends_on', sa.Uuid(), nullable=True),
    sa.Column('superseded_by', sa.Uuid(), nullable=True),
    sa.Column('recurring_id', sa.String(length=255), nullable=True),
    sa.Column('fire_time', sa.DateTime(timezone=True), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('first_due_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('terminal_status', sa.String(length=16), nullable=True),
    sa.Column('terminal_error', sa.Text(), nullable=True),
    sa.Column('result', sa.Text(), nullable=True),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('job_id', name=op.f('pk_ratchet_job')),
    sa.UniqueConstraint('idempotency_key', name=op.f('uq_ratchet_job_idempotency_key')),
    sa.UniqueConstraint('recurring_id', 'fire_time', name=op.f('uq_ratchet_job_recurring_id_fire_time'))
    )
    with op.batch_alter_table('ratchet_job', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_ratchet_job_business_key'), ['business_key'], unique=False)
        batch_op.create_index(batch_op.f('ix_ratchet_job_created_at'), ['created_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_ratchet_job_depends_on'), ['depends_on'], unique=False)
        batch_op.create_index(batch_op.f('ix_ratchet_job_superseded_by'), ['superseded_by'], unique=False)
        batch_op.create_index(batch_op.f('ix_ratchet_job_task_job_id'), ['task', 'job_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_ratchet_job_terminal_status_finished_at'), ['terminal_status', 'finished_at'], unique=False)

    op.create_table('ratchet_job_archive',
    sa.Column('job_id', sa.Uuid(), nullable=False),
    sa.Column('task', sa.String(length=255), nullable=False),
    sa.Column('terminal_status', sa.String(length=16), nullable=False),
    sa.Column('business_key', sa.String(length=255), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('archived_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('data', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('job_id', name=op.f('pk_ratchet_job_archive'))
    )
    with op.batch_alter_table('ratchet_job_archive', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_ratchet_job_archive_archived_at'), ['archived_at'], unique=False)

    op.create_table('ratchet_lock',
    sa.Column('lock_name', sa.String(length=100), nullable=False),
    sa.Column('locked_by', sa.String(length=64), nullable=False),
    sa.Column('locked_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('lock_name', name=op.f('pk_ratchet_lock'))
    )
    op.create_table('ratchet_node',
    sa.Column('node_id', sa.String(length=64), nullable=False),
    sa.Column('host', sa.String(length=255), nullable=False),
    sa.Column('pid', sa.Integer(), nullable=False),
    sa.Column('version', sa.String(length=32), nullable=False),
    sa.Column('concurrency', sa.Integer(), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('last_heartbeat', sa.DateTime(timezone=True), nullable=False),
    sa.Column('info', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('node_id', name=op.f('pk_ratchet_node'))
    )
    with op.batch_alter_table('ratchet_node', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_ratchet_node_last_heartbeat'), ['last_heartbeat'], unique=False)

    op.create_table('ratchet_recurring',
    sa.Column('recurring_id', sa.String(length=255), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('task', sa.String(length=255), nullable=False),
    sa.Column('cron', sa.String(length=255), nullable=False),
    sa.Column('zone', sa.String(length=64), nullable=False),
    sa.Column('payload', sa.Text(), nullable=False),
    sa.Column('options', sa.Text(), nullable=False),
    sa.Column('misfire', sa.String(length=32), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('next_fire', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_fire', sa.DateTime(timezone=True), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('recurring_id', name=op.f('pk_ratchet_recurring'))
    )
    with op.batch_alter_table('ratchet_recurring', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_ratchet_recurring_status_next_fire'), ['status', 'next_fire'], unique=False)

    op.create_table('ratchet_business_key',
    sa.Column('business_key', sa.String(length=255), nullable=False),
    sa.Column('job_id', sa.Uuid(), nullable=False),
    sa.Column('reserved_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['ratchet_job.job_id'], name=op.f('fk_ratchet_business_key_job_id_ratchet_job'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('business_key', name=op.f('pk_ratchet_business_key'))
    )
    with op.batch_alter_table('ratchet_business_key', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_ratchet_business_key_job_id'), ['job_id'], unique=False)

    op.create_table('ratchet_dlq_alert',
    sa.Column('alert_id', sa.Uuid(), nullable=False),
    sa.Column('job_id', sa.Uuid(), nullable=False),
    sa.Column('task', sa.String(length=255), nullable=False),
    sa.Column('error_hash', sa.String(length=64), nullable=False),
    sa.Column('error', sa.Text(), nullable=False),
    sa.Column('hour', sa.DateTime(timezone=True), nullable=False),
    sa.Column('occurrences', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('last_seen_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['ratchet_job.job_id'], name=op.f('fk_ratchet_dlq_alert_job_id_ratchet_job'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('alert_id', name=op.f('pk_ratchet_dlq_alert')),
    sa.UniqueConstraint('job_id', 'error_hash', 'hour', name=op.f('uq_ratchet_dlq_alert_job_id_error_hash_hour'))
    )
    with op.batch_alter_table('ratchet_dlq_alert', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_ratchet_dlq_alert_created_at'), ['created_at'], unique=False)

    op.create_table('ratchet_execution',
    sa.Column('execution_id', sa.Uuid(), nullable=False),
    sa.Column('job_id', sa.Uuid(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('node_id', sa.String(length=64), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('duration_ms', sa.Float(), nullable=True),
    sa.Column('queue_wait_ms', sa.Float(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('traceback', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['job_id'], ['ratchet_job.job_id'], name=op.f('fk_ratchet_execution_job_id_ratchet_job'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('execution_id', name=op.f('pk_ratchet_execution'))
    )
    with op.batch_alter_table('ratchet_execution', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_ratchet_execution_job_id'), ['job_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_ratchet_execution_started_at'), ['started_at'], unique=False)

    op.create_table('ratchet_job_log',
    sa.Column('log_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('job_id', sa.Uuid(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('logged_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('level', sa.String(length=16), nullable=False),
    sa.Column('message', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['ratchet_job.job_id'], name=op.f('fk_ratchet_job_log_job_id_ratchet_job'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('log_id', name=op.f('pk_ratchet_job_log'))
    )
    with op.batch_alter_table('ratchet_job_log', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_ratchet_job_log_job_id'), ['job_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_ratchet_job_log_logged_at'), ['logged_at'], unique=False)

    op.create_table('ratchet_job_queue',
    sa.Column('job_id', sa.Uuid(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('scheduled_time', sa.DateTime(timezone=True), nullable=False),
    sa.Column('priority', sa.SmallInteger(), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('max_retries', sa.Integer(), nullable=False),
    sa.Column('picked_by', sa.String(length=64), nullable=True),
    sa.Column('picked_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('paused_from_status', sa.String(length=16), nullable=True),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['ratchet_job.job_id'], name=op.f('fk_ratchet_job_queue_job_id_ratchet_job'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('job_id', name=op.f('pk_ratchet_job_queue'))
    )
    with op.batch_alter_table('ratchet_job_queue', schema=None) as batch_op:
        batch_op.create_index('ix_ratchet_job_queue_claim', ['priority', 'scheduled_time', 'job_id'], unique=False, postgresql_where=sa.text("status = 'PENDING'"), sqlite_where=sa.text("status = 'PENDING'"))
        batch_op.create_index(batch_op.f('ix_ratchet_job_queue_status_picked_at_picked_by'), ['status', 'picked_at', 'picked_by'], unique=False)

    op.create_table('ratchet_job_tag',
    sa.Column('job_id', sa.Uuid(), nullable=False),
    sa.Column('tag', sa.String(length=100), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['ratchet_job.job_id'], name=op.f('fk_ratchet_job_tag_job_id_ratchet_job'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('job_id', 'tag', name=op.f('pk_ratchet_job_tag'))
    )
    with op.batch_alter_table('ratchet_job_tag', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_ratchet_job_tag_tag_job_id'), ['tag', 'job_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('ratchet_job_tag', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_ratchet_job_tag_tag_job_id'))

    op.drop_table('ratchet_job_tag')
    with op.batch_alter_table('ratchet_job_queue', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_ratchet_job_queue_status_picked_at_picked_by'))
        batch_op.drop_index('ix_ratchet_job_queue_claim', postgresql_where=sa.text("status = 'PENDING'"), sqlite_where=sa.text("status = 'PENDING'"))

    op.drop_table('ratchet_job_queue')
    with op.batch_alter_table('ratchet_job_log', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_ratchet_job_log_logged_at'))
        batch_op.drop_index(batch_op.f('ix_ratchet_job_log_job_id'))

    op.drop_table('ratchet_job_log')
    with op.batch_alter_table('ratchet_execution', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_ratchet_execution_started_at'))
        batch_op.drop_index(batch_op.f('ix_ratchet_execution_job_id'))

    op.drop_table('ratchet_execution')
    with op.batch_alter_table('ratchet_dlq_alert', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_ratchet_dlq_alert_created_at'))

    op.drop_table('ratchet_dlq_alert')
    with op.batch_alter_table('ratchet_business_key', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_ratchet_business_key_job_id'))

    op.drop_table('ratchet_business_key')
    with op.batch_alter_table('ratchet_recurring', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_ratchet_recurring_status_next_fire'))

    op.drop_table('ratchet_recurring')
    with op.batch_alter_table('ratchet_node', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_ratchet_node_last_heartbeat'))

    op.drop_table('ratchet_node')
    op.drop_table('ratchet_lock')
    with op.batch_alter_table('ratchet_job_archive', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_ratchet_job_archive_archived_at'))

    op.drop_table('ratchet_job_archive')
    with op.batch_alter_table('ratchet_job', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_ratchet_job_terminal_status_finished_at'))
        batch_op.drop_index(batch_op.f('ix_ratchet_job_task_job_id'))
        batch_op.drop_index(batch_op.f('ix_ratchet_job_superseded_by'))
        batch_op.drop_index(batch_op.f('ix_ratchet_job_depends_on'))
        batch_op.drop_index(batch_op.f('ix_ratchet_job_created_at'))
        batch_op.drop_index(batch_op.f('ix_ratchet_job_business_key'))

    op.drop_table('ratchet_job')
