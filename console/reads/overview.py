"""The console's summaries, in SQLAlchemy Core for both dialects: the overview's figures (jobs
per status, executions per minute, queue health, nodes, recent actions), a job's extras for its
page, and the dead-letter groups.

Like the job lists (:mod:`.jobs`), every query is bounded: counts stop at a cap and
are estimated past it on PostgreSQL, and time series and percentiles read only the last hour.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from flask_ratchet.schema import audit, aware, execution
from flask_ratchet.states import JobStatus
from flask_ratchet.store.dialect import Dialect

from .jobs import COUNT_CAP, Count, JobQuery, count_jobs

# -- overview ---------------------------------------------------------------------------------


def status_counts(
    conn: Connection, dialect: Dialect, cap: int = COUNT_CAP
) -> dict[JobStatus, Count]:
    """Jobs per status: exact up to ``cap``, then estimated (PostgreSQL) or a lower bound.

    Where PostgreSQL's statistics already put a status far past the cap, its exact count is not
    even started: counting to the cap would only be thrown away.
    """
    estimates = dialect.status_estimates(conn)
    out: dict[JobStatus, Count] = {}
    for status in JobStatus:
        guess = estimates.get(status)
        if guess is not None and guess > ESTIMATE_ONLY_AFTER * cap:
            out[status] = Count(guess, exact=False, estimated=True)
            continue
        n = count_jobs(conn, JobQuery(status=status), cap)
        if n <= cap:
            out[status] = Count(n)
        elif guess is not None and guess > cap:
            out[status] = Count(guess, exact=False, estimated=True)
        else:
            out[status] = Count(cap, exact=False)
    return out


#: A status whose estimate exceeds this many times the cap is not counted at all.
ESTIMATE_ONLY_AFTER = 5


@dataclass(frozen=True, slots=True)
class Minute:
    """Executions that started in one minute, by outcome."""

    start: datetime
    succeeded: int
    failed: int


def throughput(
    conn: Connection, dialect: Dialect, now: datetime, minutes: int = 60
) -> list[Minute]:
    """Executions per minute over the last ``minutes`` minutes, oldest first, gaps filled."""
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=minutes - 1)
    bucket = dialect.minute_of(execution.c.started_at)
    failed = sa.case((execution.c.status == JobStatus.FAILED, 1), else_=0)
    rows = conn.execute(
        sa.select(bucket.label("minute"), sa.func.count(), sa.func.sum(failed))
        .where(execution.c.started_at >= start)
        .group_by(bucket)
    ).all()
    seen: dict[datetime, tuple[int, int]] = {}
    for minute, total, fails in rows:
        when = aware(minute)
        seen[when] = (int(total) - int(fails or 0), int(fails or 0))
    out = []
    for i in range(minutes):
        at = start + timedelta(minutes=i)
        ok, bad = seen.get(at, (0, 0))
        out.append(Minute(at, ok, bad))
    return out


def recent_audit(conn: Connection, limit: int = 10) -> list[Any]:
    """The newest audit rows."""
    # Two actions in the same instant keep their order: audit ids are UUIDv7, time ordered.
    stmt = sa.select(audit).order_by(audit.c.at.desc(), audit.c.audit_id.desc()).limit(limit)
    return list(conn.execute(stmt).all())


# -- job detail ---------------------------------------------------------------------------------


# -- dead-letter queue --------------------------------------------------------------------------
