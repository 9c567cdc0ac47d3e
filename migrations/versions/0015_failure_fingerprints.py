"""failure fingerprints: a FAILED job's dead-letter group, stored on its row

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04 09:00:00.000000

One nullable column on the cold row, without a default (on PostgreSQL a catalogue change only),
written when a job fails for good: its error with what varies between jobs replaced by
placeholders (``flask_ratchet/fingerprints.py``). The console groups dead letters by task and
fingerprint, and retries or deletes one group, on the index added here, which holds FAILED
jobs only (on MariaDB every row, FAILED ones one range of it).

The jobs that had already failed are given theirs here: read a chunk at a time in primary-key
order (:data:`CHUNK` rows, only their id and error), the fingerprints computed in Python as the
worker computes them, and written with a statement per fingerprint in each chunk (the jobs of one
chunk mostly share a few), never one UPDATE over the whole table. Only rows still without one are
read, so an upgrade run again (on MariaDB, where each DDL statement commits) finishes the rest.

The upgrade is one transaction on PostgreSQL, holding ``ratchet_job`` until it commits (an
updated row gets new entries in every index of the table): on a million jobs of which 100,898
FAILED (``python -m bench.console_pages --keep`` at 0014, then ``flask ratchet db upgrade``), it
took 26 s on a 2-core VM. Upgrade while the workers are stopped, or expect them to wait.
"""

from __future__ import annotations

import uuid
from collections import defaultdict

import sqlalchemy as sa
from alembic import op

from flask_ratchet.columns import LONG_TEXT, StoredUuid
from flask_ratchet.fingerprints import MAX_FINGERPRINT, fingerprint

revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None

#: Failed jobs read and written at a time.
CHUNK = 1000

_job = sa.table(
    'ratchet_job',
    sa.column('job_id', StoredUuid()),
    sa.column('terminal_status', sa.String(16)),
    sa.column('terminal_error', LONG_TEXT),
    sa.column('fingerprint', sa.String(MAX_FINGERPRINT)),
)


def upgrade() -> None:
    with op.batch_alter_table('ratchet_job') as table:
        table.add_column(sa.Column('fingerprint', sa.String(length=MAX_FINGERPRINT), nullable=True))
    failed = sa.text("terminal_status = 'FAILED'")
    op.create_index(
        'ix_ratchet_job_failed_fingerprint',
        'ratchet_job',
        ['task', 'fingerprint', 'job_id'],
        unique=False,
        postgresql_where=failed,
        sqlite_where=failed,
    )
    backfill(op.get_bind())


def backfill(conn: sa.Connection) -> int:
    """Give every FAILED job without a fingerprint its own, :data:`CHUNK` jobs at a time;
    return how many."""
    done = 0
    after: uuid.UUID | None = None
    while True:
        stmt = sa.select(_job.c.job_id, _job.c.terminal_error).where(
            _job.c.terminal_status == 'FAILED', _job.c.fingerprint.is_(None)
        )
        if after is not None:
            stmt = stmt.where(_job.c.job_id > after)
        rows = conn.execute(stmt.order_by(_job.c.job_id).limit(CHUNK)).all()
        if not rows:
            return done
        groups: dict[str, list[uuid.UUID]] = defaultdict(list)
        for job_id, error in rows:
            groups[fingerprint(error)].append(job_id)
        for value, ids in groups.items():
            conn.execute(
                sa.update(_job).where(_job.c.job_id.in_(ids)).values(fingerprint=value)
            )
        done += len(rows)
        after = rows[-1].job_id


def downgrade() -> None:
    op.drop_index('ix_ratchet_job_failed_fingerprint', table_name='ratchet_job')
    with op.batch_alter_table('ratchet_job') as table:
        table.drop_column('fingerprint')
