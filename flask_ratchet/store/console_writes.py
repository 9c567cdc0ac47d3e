"""The console's own writes: deleting an ended job (guarded) and the audit trail.

Status changes go through the store's guarded operations (``cancel``, ``retry``…); only deletion,
which the library has no operation for, is written here, as a compare-and-swap like the others.
"""

from __future__ import annotations

import uuid
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..ids import uuid7
from ..schema import audit, business_key, dlq_alert, execution, job, job_log, job_queue, job_tag
from ..states import TERMINAL


def delete_ended_job(conn: Connection, job_id: uuid.UUID) -> bool:
    """Delete a SUCCEEDED, FAILED or CANCELED job and everything that belongs to it.

    The guard is the cold row's terminal status and the absence of a hot row (a paused FAILED
    job has one again): a job that is live, or was retried a moment ago, is left alone and the
    call returns False. Children are deleted explicitly because SQLite does not enforce the
    foreign keys' ``ON DELETE CASCADE`` unless the connection asks for it.

    Three statements, in this order, because of concurrent pauses and retries on PostgreSQL:
    the cold row is locked first (``FOR UPDATE``, which also conflicts with the key-share lock a
    new hot row's foreign key takes), so a pause or retry that already inserted a hot row has
    committed before the hot-row check runs, and one that comes later waits for this delete and
    then finds no job. The check is a statement of its own so that, under READ COMMITTED, it
    sees what committed while the lock was awaited. SQLite's ``BEGIN IMMEDIATE`` already
    serialises writers (SQLAlchemy renders no ``FOR UPDATE`` there).
    """
    locked = conn.execute(
        sa.select(job.c.job_id)
        .where(job.c.job_id == job_id, job.c.terminal_status.in_(sorted(TERMINAL)))
        .with_for_update()
    ).first()
    if locked is None:
        return False
    hot = conn.execute(sa.select(job_queue.c.job_id).where(job_queue.c.job_id == job_id)).first()
    if hot is not None:
        return False
    conn.execute(sa.delete(job).where(job.c.job_id == job_id))
    for table in (execution, job_log, dlq_alert, job_tag, business_key):
        conn.execute(sa.delete(table).where(table.c.job_id == job_id))
    return True


def record_audit(
    conn: Connection,
    *,
    at: datetime,
    actor: str,
    role: str,
    action: str,
    scope: str,
    target: str,
    requested: int,
    changed: int,
) -> uuid.UUID:
    """Write one audit row: who did what to how many jobs, and how many actually changed."""
    audit_id = uuid7()
    conn.execute(
        sa.insert(audit).values(
            audit_id=audit_id,
            at=at,
            actor=actor[:255],
            role=role,
            action=action,
            scope=scope,
            target=target,
            requested=requested,
            changed=changed,
        )
    )
    return audit_id
