"""The console's summaries, in SQLAlchemy Core for both dialects: the overview's figures (jobs
per status, executions over the chart's window, queue health, nodes, recent actions), a job's
extras for its page, and the dead-letter groups.

Like the job lists (:mod:`.jobs`), every query is bounded: counts stop at a cap and
are estimated past it on PostgreSQL, and time series and percentiles read only a bounded span
of time (the chart's window: at most a day; percentiles: the last hour).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from flask_ratchet.columns import UtcDateTime, const
from flask_ratchet.schema import audit, execution, job_queue
from flask_ratchet.states import JobStatus
from flask_ratchet.store.cluster import WORKER_STOPPED
from flask_ratchet.store.dialect import Dialect
from flask_ratchet.substates import OF_STATUS, SubState

from . import substates
from .jobs import COUNT_CAP, Count, JobQuery, count_jobs

# -- overview ---------------------------------------------------------------------------------


def substate_counts(
    conn: Connection, now: datetime, cap: int = COUNT_CAP
) -> dict[JobStatus, dict[SubState, Count]]:
    """PENDING and RUNNING jobs per sub-state at ``now``: exact while the status holds at most
    ``cap`` jobs; beyond, counted among ``cap`` + 1 of them (a lower bound, not exact)."""
    out: dict[JobStatus, dict[SubState, Count]] = {}
    for status, subs in OF_STATUS.items():
        rows = (
            sa.select(
                job_queue.c.scheduled_time,
                job_queue.c.attempts,
                job_queue.c.queue,
                job_queue.c.picked_at,
                job_queue.c.started_at,
            )
            .where(job_queue.c.status == const(status))
            .limit(cap + 1)
            .subquery()
        )
        sums = [
            sa.func.sum(sa.case((substates.condition(sub, now, rows.c), 1), else_=0))
            for sub in subs
        ]
        n, *per_sub = conn.execute(sa.select(sa.func.count(), *sums).select_from(rows)).one()
        exact = int(n) <= cap
        out[status] = {
            sub: Count(int(k or 0), exact=exact) for sub, k in zip(subs, per_sub, strict=True)
        }
    return out


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
class Window:
    """A span the overview's chart shows: how far back it reads and how wide each bar is."""

    #: As the ``window`` parameter spells it: ``15m``, ``1h``, ``24h``.
    key: str
    #: As a heading says it: "last hour"; and as its link does: "1 hour".
    title: str
    label: str
    minutes: int
    #: Minutes per bar; bars start on multiples of it since midnight UTC.
    bucket: int
    #: Minutes between the time labels under the bars (on multiples of it since midnight).
    label_every: int
    #: Seconds between refreshes of the overview while it shows this window: the 24-hour read
    #: is the heaviest, and its bars are half an hour wide.
    refresh: int

    @property
    def bars(self) -> int:
        return self.minutes // self.bucket


#: The chart's windows, by ``window`` parameter.
WINDOWS = {
    w.key: w
    for w in (
        Window("15m", "last 15 minutes", "15 minutes", 15, 1, 5, 5),
        Window("1h", "last hour", "1 hour", 60, 1, 15, 5),
        Window("24h", "last 24 hours", "24 hours", 24 * 60, 30, 6 * 60, 30),
    )
}
DEFAULT_WINDOW = WINDOWS["1h"]


@dataclass(frozen=True, slots=True)
class Bucket:
    """Executions (attempts) that started within one bar of the chart, by outcome."""

    start: datetime
    minutes: int
    succeeded: int
    failed: int


def throughput(conn: Connection, now: datetime, window: Window = DEFAULT_WINDOW) -> list[Bucket]:
    """Executions per bar of ``window`` up to ``now``, oldest first.

    One statement of two range counts per bar: its runs on the ``started_at`` index, its failed
    runs on the index of failed runs, both covering (on PostgreSQL, rows are read only on pages
    vacuum has not marked all-visible yet: the newest). Grouping the window's rows by minute
    read each one for its status: a day of 1.44 million runs took 258 ms that way on PostgreSQL
    and 85 ms this way, 1,237 and 66 ms on SQLite (``python -m bench.chart``).
    A run that started ahead of the database's clock, past the current bar, is left out.
    """
    step = timedelta(minutes=window.bucket)
    minute = now.replace(second=0, microsecond=0)
    current = minute - timedelta(minutes=(minute.hour * 60 + minute.minute) % window.bucket)
    edges = [current - step * (window.bars - 1 - i) for i in range(window.bars + 1)]
    started = execution.c.started_at
    failed = execution.c.status == const(JobStatus.FAILED)
    # The bars as rows (a VALUES list with named columns is not SQLite's), each counted by a
    # correlated subquery: planned once, run per bar.
    bars = sa.union_all(
        *(
            sa.select(
                sa.literal_column(str(i)).label("bar"),
                sa.literal(low, UtcDateTime).label("low"),
                sa.literal(high, UtcDateTime).label("high"),
            )
            for i, (low, high) in enumerate(pairwise(edges))
        )
    ).cte("bars")

    def runs(*where: Any) -> Any:
        return (
            sa.select(sa.func.count())
            .where(started >= bars.c.low, started < bars.c.high, *where)
            .scalar_subquery()
        )

    counted = sa.select(bars.c.bar, runs().label("runs"), runs(failed).label("failed"))
    rows = conn.execute(counted.order_by(bars.c.bar))  # one per bar: the CTE has them all
    return [
        Bucket(low, window.bucket, n - bad, bad)
        for low, (_, n, bad) in zip(edges, rows, strict=False)
    ]


def recent_audit(conn: Connection, limit: int = 10) -> list[Any]:
    """The newest audit rows of operators' actions (not the workers' clean stops, which the
    nodes page names)."""
    # Two actions in the same instant keep their order: audit ids are UUIDv7, time ordered.
    stmt = (
        sa.select(audit)
        .where(audit.c.action != WORKER_STOPPED)
        .order_by(audit.c.at.desc(), audit.c.audit_id.desc())
        .limit(limit)
    )
    return list(conn.execute(stmt).all())


# -- job detail ---------------------------------------------------------------------------------


# -- dead-letter queue --------------------------------------------------------------------------
