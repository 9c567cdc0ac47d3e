"""What a job reads back as: a :class:`~flask_ratchet.job.Job` snapshot from its cold row and,
while it is live, its hot row (a job's status is the hot row's if it has one, else the cold
row's terminal status); its tags; the filters ``find_jobs`` and the console's job list share.

Stored values are read defensively (see :func:`to_job`): a row written by hand never makes a
read fail.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row
from sqlalchemy.sql import Select

from .. import payload
from ..columns import const
from ..job import Job, decode_progress
from ..options import Backoff, Priority
from ..paging import JOB_CURSOR, Page, cursor_id
from ..paging import cursor as cursor_of
from ..schema import job, job_queue, job_tag
from ..states import LIVE, TERMINAL, JobStatus
from .types import JobFilter

#: The columns a snapshot is read from.
SNAPSHOT_COLUMNS = [
    job.c.job_id,
    job.c.task,
    job.c.queue,
    job.c.priority,
    job.c.payload,
    job.c.params,
    job.c.max_retries,
    job.c.backoff,
    job.c.backoff_base,
    job.c.timeout,
    job.c.resource_name,
    job.c.idempotency_key,
    job.c.business_key,
    job.c.depends_on,
    job.c.superseded_by,
    job.c.recurring_id,
    job.c.created_at,
    job.c.first_due_at,
    job.c.terminal_status,
    job.c.terminal_error,
    job.c.result,
    job.c.attempts,
    job.c.finished_at,
    job.c.expires_at,
    job.c.signal_key,
    job.c.signal_timeout,
    job.c.principal,
    job_queue.c.status,
    job_queue.c.scheduled_time,
    job_queue.c.attempts.label("live_attempts"),
    job_queue.c.picked_by,
    job_queue.c.picked_at,
    job_queue.c.paused_from_status,
    job_queue.c.last_error,
    # While the job runs its hot row has it; after the end, the cold row keeps the last one.
    sa.func.coalesce(job_queue.c.progress, job.c.progress).label("progress"),
]
SNAPSHOT_FROM = job.outerjoin(job_queue, job_queue.c.job_id == job.c.job_id)


def get_job(conn: Connection, job_id: uuid.UUID) -> Job | None:
    """A snapshot of one job, or ``None`` if there is no such job."""
    row = conn.execute(
        sa.select(*SNAPSHOT_COLUMNS).select_from(SNAPSHOT_FROM).where(job.c.job_id == job_id)
    ).first()
    if row is None:
        return None
    return to_job(row, tags_of(conn, [job_id]).get(job_id, ()))


def get_jobs(conn: Connection, ids: list[uuid.UUID]) -> list[Job]:
    """Snapshots of the jobs ``ids`` names that exist, in id order."""
    if not ids:
        return []
    rows = conn.execute(
        sa.select(*SNAPSHOT_COLUMNS)
        .select_from(SNAPSHOT_FROM)
        .where(job.c.job_id.in_(ids))
        .order_by(job.c.job_id)
    ).all()
    tags = tags_of(conn, [r.job_id for r in rows])
    return [to_job(r, tags.get(r.job_id, ())) for r in rows]


def find_jobs(conn: Connection, where: JobFilter, limit: int, cursor: str | None) -> Page[Job]:
    """Jobs matching ``where``, newest first, a page at a time (keyset by id)."""
    stmt = sa.select(*SNAPSHOT_COLUMNS).select_from(SNAPSHOT_FROM)
    if where.statuses:
        live = [s for s in where.statuses if s in LIVE]
        ended = [s for s in where.statuses if s in TERMINAL]
        stmt = stmt.where(
            sa.or_(
                job_queue.c.status.in_(live),
                sa.and_(job_queue.c.job_id.is_(None), job.c.terminal_status.in_(ended)),
            )
        )
    stmt = narrowed_by(stmt, where)
    if cursor is not None:
        stmt = stmt.where(job.c.job_id < cursor_id(cursor, JOB_CURSOR))
    # UUIDv7 ids grow with time: newest first, and a new job never shifts a later page.
    rows = conn.execute(stmt.order_by(job.c.job_id.desc()).limit(limit + 1)).all()
    more = len(rows) > limit
    rows = rows[:limit]
    tags = tags_of(conn, [r.job_id for r in rows])
    items = [to_job(r, tags.get(r.job_id, ())) for r in rows]
    return Page(items, cursor_of(JOB_CURSOR, rows[-1].job_id) if more else None)


S = TypeVar("S", bound=Select[Any])


def tags_of(conn: Connection, ids: list[uuid.UUID]) -> dict[uuid.UUID, tuple[str, ...]]:
    """The tags of each of ``ids`` (sorted); jobs without tags are left out."""
    if not ids:
        return {}
    out: dict[uuid.UUID, list[str]] = {}
    rows = conn.execute(
        sa.select(job_tag.c.job_id, job_tag.c.tag)
        .where(job_tag.c.job_id.in_(ids))
        .order_by(job_tag.c.job_id, job_tag.c.tag)
    )
    for job_id, tag in rows:
        out.setdefault(job_id, []).append(tag)
    return {k: tuple(v) for k, v in out.items()}


def by_id_only(column: sa.Column[Any]) -> sa.ColumnElement[Any]:
    """``column`` in a form no index serves, where the ids are the way in: beside a list of
    ids, whose primary key lookup is always the plan to take (right after a bulk change in the
    same transaction, PostgreSQL's statistics of the statuses are stale and can make a status
    index look better, to be scanned whole for each chunk), and for a keyset walk in id order."""
    return sa.func.coalesce(column, "")


def narrowed_by(stmt: S, where: JobFilter) -> S:
    """``stmt`` narrowed by every filter of ``where`` but its statuses (see :func:`narrowed`)."""
    return narrowed(
        stmt,
        task=where.task,
        business_key=where.business_key,
        tag=where.tag,
        created_after=where.created_after,
        created_before=where.created_before,
        queue=where.queue,
        batch_id=where.batch_id,
        ended_after=where.ended_after,
        ended_before=where.ended_before,
        principal=where.principal,
        fingerprint=where.fingerprint,
    )


def narrowed(
    stmt: S,
    *,
    task: str | None = None,
    business_key: str | None = None,
    tag: str | None = None,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
    queue: str | None = None,
    batch_id: uuid.UUID | None = None,
    ended_after: datetime | None = None,
    ended_before: datetime | None = None,
    principal: str | None = None,
    fingerprint: str | None = None,
) -> S:
    """``stmt`` (over ``ratchet_job``) narrowed by the filters ``find_jobs`` and the console's
    job list share; ``None`` means any."""
    if task is not None:
        stmt = stmt.where(job.c.task == task)
    if queue is not None:
        # Written into the SQL (a validated queue name), so that PostgreSQL can use the partial
        # index of the queues other than the default.
        stmt = stmt.where(job.c.queue == sa.bindparam(None, queue, literal_execute=True))
    if business_key is not None:
        stmt = stmt.where(job.c.business_key == business_key)
    if tag is not None:
        stmt = stmt.where(sa.exists().where(job_tag.c.job_id == job.c.job_id, job_tag.c.tag == tag))
    if created_after is not None:
        stmt = stmt.where(job.c.created_at >= created_after)
    if created_before is not None:
        stmt = stmt.where(job.c.created_at < created_before)
    if batch_id is not None:
        stmt = stmt.where(job.c.batch_id == batch_id)
    if ended_after is not None:
        stmt = stmt.where(job.c.finished_at >= ended_after)
    if ended_before is not None:
        stmt = stmt.where(job.c.finished_at < ended_before)
    if principal is not None:
        stmt = stmt.where(job.c.principal == principal)
    if fingerprint is not None:
        # Only FAILED jobs have one: saying so lets the (task, fingerprint, job_id) index of
        # FAILED jobs find them.
        stmt = stmt.where(
            job.c.fingerprint == fingerprint, job.c.terminal_status == const(JobStatus.FAILED)
        )
    return stmt


def to_job(row: Row[Any], tags: tuple[str, ...]) -> Job:
    """A snapshot of a job's rows. Stored JSON is read defensively: a column that is not what
    ratchet writes comes back as :class:`~flask_ratchet.payload.Unreadable`, never an error."""
    live = row.status is not None
    args, kwargs = payload.read_call(row.payload)
    return Job(
        id=row.job_id,
        task=row.task,
        queue=row.queue,
        status=payload.read_member(
            JobStatus,
            "status" if live else "terminal_status",
            row.status if live else row.terminal_status,
        ),
        priority=payload.read_member(Priority, "priority", row.priority),
        args=args,
        kwargs=kwargs,
        params=payload.read_stored("params", row.params, dict) or {},
        attempts=row.live_attempts if live else row.attempts,
        max_retries=row.max_retries,
        backoff=payload.read_member(Backoff, "backoff", row.backoff),
        backoff_base=row.backoff_base,
        timeout=row.timeout,
        resource=row.resource_name,
        tags=tags,
        idempotency_key=row.idempotency_key,
        business_key=row.business_key,
        created_at=row.created_at,
        scheduled_at=row.scheduled_time if live else row.first_due_at,
        picked_by=row.picked_by,
        picked_at=row.picked_at,
        paused_from=(
            payload.read_member(JobStatus, "paused_from_status", row.paused_from_status)
            if row.paused_from_status
            else None
        ),
        finished_at=row.finished_at,
        error=row.last_error if live else row.terminal_error,
        result=payload.read_stored("result", row.result),
        superseded_by=row.superseded_by,
        depends_on=row.depends_on,
        recurring_id=row.recurring_id,
        progress=None if row.progress is None else payload.read_with(decode_progress, row.progress),
        expires_at=row.expires_at,
        signal_key=row.signal_key,
        signal_wait=row.signal_timeout if isinstance(row.signal_timeout, int | float) else None,
        principal=row.principal,
    )
