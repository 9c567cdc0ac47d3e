"""The console's summaries, in SQLAlchemy Core for both dialects: the overview's figures (jobs
per status, executions per minute, queue health, nodes, recent actions), a job's extras for its
page, and the dead-letter groups.

Like the job lists (:mod:`.console_queries`), every query is bounded: counts stop at a cap and
are estimated past it on PostgreSQL, and time series and percentiles read only the last hour.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .. import payload
from ..payload import Unreadable
from ..schema import audit, dlq_alert, execution, job, job_log, job_queue, node
from ..states import LIVE, JobStatus
from .console_queries import COUNT_CAP, JOBS_WITH_HOT_ROW, Count, JobQuery, const, count_jobs

#: The p95 queue wait is taken over at most this many of the last hour's newest executions.
P95_SAMPLE = 5_000

# -- overview ---------------------------------------------------------------------------------


def status_counts(conn: Connection, cap: int = COUNT_CAP) -> dict[JobStatus, Count]:
    """Jobs per status: exact up to ``cap``, then estimated (PostgreSQL) or a lower bound.

    Where PostgreSQL's statistics already put a status far past the cap, its exact count is not
    even started: counting to the cap would only be thrown away.
    """
    estimates = _estimates(conn)
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

_ESTIMATES = sa.text(
    "SELECT s.tablename, s.most_common_vals::text::text[] AS vals, "
    "s.most_common_freqs AS freqs, c.reltuples "
    "FROM pg_stats s JOIN pg_class c ON c.relname = s.tablename "
    "AND c.relnamespace = to_regnamespace(quote_ident(s.schemaname)) "
    "WHERE s.schemaname = current_schema() AND ("
    "(s.tablename = 'ratchet_job_queue' AND s.attname = 'status') OR "
    "(s.tablename = 'ratchet_job' AND s.attname = 'terminal_status'))"
)


def _estimates(conn: Connection) -> dict[JobStatus, int]:
    """PostgreSQL's estimate of the rows per status (``reltuples`` times the value's frequency
    in ``pg_stats``): live statuses from the hot table, ended ones from the cold rows."""
    if conn.dialect.name != "postgresql":
        return {}
    out: dict[JobStatus, int] = {}
    for row in conn.execute(_ESTIMATES):
        if row.reltuples is None or row.reltuples < 0 or not row.vals:
            continue
        live = row.tablename == "ratchet_job_queue"
        for value, freq in zip(row.vals, row.freqs, strict=False):
            if value in JobStatus.__members__ and (JobStatus(value) in LIVE) == live:
                out[JobStatus(value)] = int(row.reltuples * freq + 0.5)
    return out


@dataclass(frozen=True, slots=True)
class Minute:
    """Executions that started in one minute, by outcome."""

    start: datetime
    succeeded: int
    failed: int


def throughput(conn: Connection, now: datetime, minutes: int = 60) -> list[Minute]:
    """Executions per minute over the last ``minutes`` minutes, oldest first, gaps filled."""
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=minutes - 1)
    if conn.dialect.name == "postgresql":
        bucket: Any = sa.func.date_trunc("minute", execution.c.started_at)
    else:
        bucket = sa.func.strftime("%Y-%m-%d %H:%M:00", execution.c.started_at)
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


def aware(value: Any) -> datetime:
    """A timestamp read back from the database (a string, or naive, on SQLite) in UTC."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    assert isinstance(value, datetime)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def oldest_due_age(conn: Connection, now: datetime) -> float | None:
    """Seconds the oldest due PENDING job has waited, read from the claim index per priority."""
    oldest: datetime | None = None
    for prio in range(5):
        due = conn.execute(
            sa.select(job_queue.c.scheduled_time)
            .where(
                job_queue.c.status == const(JobStatus.PENDING),
                job_queue.c.priority == const(prio),
                job_queue.c.scheduled_time <= now,
            )
            .order_by(job_queue.c.scheduled_time)
            .limit(1)
        ).scalar()
        if due is not None and (oldest is None or due < oldest):
            oldest = due
    return None if oldest is None else max(0.0, (now - oldest).total_seconds())


def p95_queue_wait(conn: Connection, now: datetime) -> float | None:
    """The 95th percentile queue wait (seconds) of the last hour's newest executions."""
    waits = sorted(
        w
        for w in conn.execute(
            sa.select(execution.c.queue_wait_ms)
            .where(execution.c.started_at >= now - timedelta(hours=1))
            .order_by(execution.c.started_at.desc())
            .limit(P95_SAMPLE)
        ).scalars()
        if w is not None
    )
    if not waits:
        return None
    return float(waits[int(0.95 * (len(waits) - 1))]) / 1000.0


@dataclass(frozen=True, slots=True)
class NodeRow:
    """A worker node as the console shows it."""

    node_id: str
    host: str
    pid: int
    version: str
    concurrency: int
    started_at: datetime
    heartbeat_age: float
    running: int


def nodes(conn: Connection, now: datetime) -> list[NodeRow]:
    """Every node row with its heartbeat age and how many jobs it holds RUNNING."""
    running: dict[str, int] = dict(
        conn.execute(
            sa.select(job_queue.c.picked_by, sa.func.count())
            .where(job_queue.c.status == JobStatus.RUNNING)
            .group_by(job_queue.c.picked_by)
        ).all()
    )
    rows = conn.execute(sa.select(node).order_by(node.c.node_id).limit(500)).all()
    return [
        NodeRow(
            node_id=r.node_id,
            host=r.host,
            pid=r.pid,
            version=r.version,
            concurrency=r.concurrency,
            started_at=r.started_at,
            heartbeat_age=max(0.0, (now - r.last_heartbeat).total_seconds()),
            running=int(running.get(r.node_id, 0)),
        )
        for r in rows
    ]


def recent_audit(conn: Connection, limit: int = 10) -> list[Any]:
    """The newest audit rows."""
    # Two actions in the same instant keep their order: audit ids are UUIDv7, time ordered.
    stmt = sa.select(audit).order_by(audit.c.at.desc(), audit.c.audit_id.desc()).limit(limit)
    return list(conn.execute(stmt).all())


# -- job detail ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobExtras:
    """What the job page shows beyond :class:`~flask_ratchet.job.Job`."""

    executions: list[Any]
    logs: list[Any]
    logs_truncated: bool
    #: The last progress reported; :class:`~flask_ratchet.payload.Unreadable` if not a JSON object.
    progress: dict[str, Any] | Unreadable | None
    supersedes: list[uuid.UUID]
    dependents: list[uuid.UUID]
    alerts: list[Any]


def job_extras(conn: Connection, job_id: uuid.UUID, log_limit: int = 500) -> JobExtras:
    """Executions, log lines, progress, neighbours and DLQ alerts of one job."""
    executions = conn.execute(
        sa.select(execution)
        .where(execution.c.job_id == job_id)
        .order_by(execution.c.started_at, execution.c.attempt)
        .limit(200)
    ).all()
    logs = job_logs(conn, job_id, log_limit + 1)
    progress_text = conn.execute(
        sa.select(sa.func.coalesce(job_queue.c.progress, job.c.progress))
        .select_from(JOBS_WITH_HOT_ROW)
        .where(job.c.job_id == job_id)
    ).scalar()
    supersedes = conn.execute(
        sa.select(job.c.job_id).where(job.c.superseded_by == job_id).limit(20)
    ).scalars()
    dependents = conn.execute(
        sa.select(job.c.job_id).where(job.c.depends_on == job_id).limit(20)
    ).scalars()
    alerts = conn.execute(
        sa.select(dlq_alert)
        .where(dlq_alert.c.job_id == job_id)
        .order_by(dlq_alert.c.hour.desc())
        .limit(50)
    ).all()
    progress = payload.read_stored("progress", progress_text, dict) if progress_text else None
    return JobExtras(
        executions=list(executions),
        logs=list(logs[:log_limit]),
        logs_truncated=len(logs) > log_limit,
        progress=progress,
        supersedes=list(supersedes),
        dependents=list(dependents),
        alerts=list(alerts),
    )


def job_logs(conn: Connection, job_id: uuid.UUID, limit: int) -> list[Any]:
    """The first ``limit`` log lines of one job, oldest first, as stored (not masked)."""
    return list(
        conn.execute(
            sa.select(job_log)
            .where(job_log.c.job_id == job_id)
            .order_by(job_log.c.log_id)
            .limit(limit)
        )
    )


# -- dead-letter queue --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FailureGroup:
    """Jobs of one task that failed for good with one error, from the DLQ alerts."""

    task: str
    error: str
    jobs: int
    occurrences: int
    first_seen: datetime
    last_seen: datetime
    recent_jobs: list[uuid.UUID]


def failure_groups(conn: Connection, limit: int = 100) -> list[FailureGroup]:
    """DLQ alerts grouped by task and error, most recently seen first.

    Alerts are kept for ``RATCHET_DLQ_RETENTION_DAYS``, which bounds what this reads.
    """
    a = dlq_alert.c
    groups = conn.execute(
        sa.select(
            a.task,
            a.error_hash,
            sa.func.max(a.error).label("error"),
            sa.func.count(sa.distinct(a.job_id)).label("jobs"),
            sa.func.sum(a.occurrences).label("occurrences"),
            sa.func.min(a.created_at).label("first_seen"),
            sa.func.max(a.last_seen_at).label("last_seen"),
        )
        .group_by(a.task, a.error_hash)
        .order_by(sa.func.max(a.last_seen_at).desc())
        .limit(limit)
    ).all()
    recent = _recent_failed_jobs(conn, [(g.task, g.error_hash) for g in groups])
    return [
        FailureGroup(
            task=g.task,
            error=g.error,
            jobs=int(g.jobs),
            occurrences=int(g.occurrences or 0),
            first_seen=aware(g.first_seen),
            last_seen=aware(g.last_seen),
            recent_jobs=recent.get((g.task, g.error_hash), []),
        )
        for g in groups
    ]


def _recent_failed_jobs(
    conn: Connection, groups: list[tuple[str, str]], per_group: int = 5
) -> dict[tuple[str, str], list[uuid.UUID]]:
    """The jobs of each (task, error hash) group whose alerts were seen last: one query."""
    if not groups:
        return {}
    a = dlq_alert.c
    per_job = (
        sa.select(a.task, a.error_hash, a.job_id, sa.func.max(a.last_seen_at).label("seen"))
        .where(a.error_hash.in_({h for _, h in groups}))
        .group_by(a.task, a.error_hash, a.job_id)
        .subquery()
    )
    ranked = sa.select(
        per_job,
        sa.func.row_number()
        .over(
            partition_by=(per_job.c.task, per_job.c.error_hash),
            order_by=(per_job.c.seen.desc(), per_job.c.job_id.desc()),
        )
        .label("n"),
    ).subquery()
    rows = conn.execute(
        sa.select(ranked.c.task, ranked.c.error_hash, ranked.c.job_id)
        .where(ranked.c.n <= per_group)
        .order_by(ranked.c.task, ranked.c.error_hash, ranked.c.n)
    )
    out: dict[tuple[str, str], list[uuid.UUID]] = {}
    for task, error_hash, job_id in rows:
        out.setdefault((task, error_hash), []).append(job_id)
    return out
