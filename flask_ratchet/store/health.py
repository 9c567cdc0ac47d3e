"""How the queue is doing: the one computation behind ``ratchet.queue_health()`` and the
console's overview.

Each figure reads a bounded amount: the oldest due job from the claim index, one row per
priority level; the p95 queue wait from the last hour's newest :data:`P95_SAMPLE` executions.
Only the exact counts per status and of due jobs (the library's, which the console replaces by
capped counts) grow with the table.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from ..columns import const
from ..options import Priority
from ..schema import execution, job, job_queue
from ..states import JobStatus

#: The p95 queue wait is taken over at most this many of the last hour's newest executions.
P95_SAMPLE = 5_000


def queue_health(conn: Connection, now: datetime, queue: str | None = None) -> dict[str, Any]:
    """Counts per status, due jobs, the oldest due job's wait and the p95 queue wait (seconds),
    of every job or of ``queue``'s; ``now`` is the database's time."""
    return {
        "counts": status_counts(conn, queue),
        "due": due_count(conn, now, queue),
        "oldest_pending_age": oldest_due_age(conn, now, queue),
        "p95_queue_wait": p95_queue_wait(conn, now, queue),
    }


def _of(table: sa.Table, queue: str | None) -> tuple[ColumnElement[bool], ...]:
    """The condition that keeps ``table``'s rows of ``queue`` (none for every queue)."""
    return () if queue is None else (table.c.queue == queue,)


def status_counts(conn: Connection, queue: str | None = None) -> dict[str, int]:
    """Exact counts of jobs per status (every status, 0 included)."""
    counts = {str(s): 0 for s in JobStatus}
    for status, n in conn.execute(
        sa.select(job_queue.c.status, sa.func.count())
        .where(*_of(job_queue, queue))
        .group_by(job_queue.c.status)
    ):
        counts[status] = n
    ended = (
        sa.select(job.c.terminal_status, sa.func.count())
        .select_from(job.outerjoin(job_queue, job_queue.c.job_id == job.c.job_id))
        .where(job_queue.c.job_id.is_(None), job.c.terminal_status.is_not(None), *_of(job, queue))
        .group_by(job.c.terminal_status)
    )
    for status, n in conn.execute(ended):
        counts[status] = n
    return counts


def due_count(conn: Connection, now: datetime, queue: str | None = None) -> int:
    """PENDING jobs due at ``now``."""
    return int(
        conn.execute(
            sa.select(sa.func.count()).where(
                job_queue.c.status == JobStatus.PENDING,
                job_queue.c.scheduled_time <= now,
                *_of(job_queue, queue),
            )
        ).scalar_one()
    )


class DueRow(NamedTuple):
    """The PENDING job due longest: when it was due, its id and its queue."""

    scheduled_time: datetime
    job_id: uuid.UUID
    queue: str


def oldest_due(conn: Connection, now: datetime, queue: str | None = None) -> DueRow | None:
    """The PENDING job due longest (of ``queue``'s), read from a claim index one priority
    level at a time: one probe per level, however many jobs are due."""
    found: list[DueRow] = []
    for prio in Priority:
        row = conn.execute(
            sa.select(job_queue.c.scheduled_time, job_queue.c.job_id, job_queue.c.queue)
            .where(
                job_queue.c.status == const(JobStatus.PENDING),
                *_of(job_queue, queue),
                job_queue.c.priority == const(prio),
                job_queue.c.scheduled_time <= now,
            )
            .order_by(job_queue.c.scheduled_time)
            .limit(1)
        ).first()
        if row is not None:
            found.append(DueRow(row.scheduled_time, row.job_id, row.queue))
    return min(found, key=lambda r: r.scheduled_time, default=None)


def oldest_due_age(conn: Connection, now: datetime, queue: str | None = None) -> float | None:
    """Seconds the oldest due PENDING job has waited (see :func:`oldest_due`)."""
    oldest = oldest_due(conn, now, queue)
    return None if oldest is None else max(0.0, (now - oldest.scheduled_time).total_seconds())


def p95_queue_wait(conn: Connection, now: datetime, queue: str | None = None) -> float | None:
    """The 95th percentile queue wait (seconds) of the last hour's newest executions."""
    recent = sa.select(execution.c.queue_wait_ms).where(
        execution.c.started_at >= now - timedelta(hours=1)
    )
    if queue is not None:
        recent = recent.join(job, job.c.job_id == execution.c.job_id).where(job.c.queue == queue)
    waits = sorted(
        w
        for w in conn.execute(
            recent.order_by(execution.c.started_at.desc()).limit(P95_SAMPLE)
        ).scalars()
        if w is not None
    )
    if not waits:
        return None
    return float(waits[int(0.95 * (len(waits) - 1))]) / 1000.0


__all__ = [
    "P95_SAMPLE",
    "DueRow",
    "due_count",
    "oldest_due",
    "oldest_due_age",
    "p95_queue_wait",
    "queue_health",
]


class Health:
    """``store.health``: the figures above, for callers outside the store (the API, the console's
    overview), which do not import store modules (see docs/architecture.md, the SQL border)."""

    def queue_health(
        self, conn: Connection, now: datetime, queue: str | None = None
    ) -> dict[str, Any]:
        """See :func:`queue_health`."""
        return queue_health(conn, now, queue)

    def oldest_due_age(
        self, conn: Connection, now: datetime, queue: str | None = None
    ) -> float | None:
        """See :func:`oldest_due_age`."""
        return oldest_due_age(conn, now, queue)

    def p95_queue_wait(
        self, conn: Connection, now: datetime, queue: str | None = None
    ) -> float | None:
        """See :func:`p95_queue_wait`."""
        return p95_queue_wait(conn, now, queue)
