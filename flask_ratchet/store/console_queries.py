"""The reads behind the operator console, in SQLAlchemy Core for both dialects.

Every query here is bounded, so a page costs the same with a thousand jobs or a million:

- lists are keyset-paged (``WHERE job_id < :cursor ORDER BY job_id DESC LIMIT n``) on an index
  for each filter the console offers (see ``schema.py``);
- counts stop at a cap (``SELECT count(*) FROM (SELECT 1 … LIMIT cap + 1)``); past it, PostgreSQL
  estimates from the planner's statistics (``pg_class.reltuples`` times the value's frequency in
  ``pg_stats``) and SQLite says "more than";
- time series and percentiles read only the last hour, newest rows first, with a row cap.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql import Select

from .. import payload
from ..options import Priority
from ..schema import audit, dlq_alert, execution, job, job_log, job_queue, job_tag, node
from ..states import LIVE, JobStatus

#: Exact counts stop here; beyond it a count is an estimate (PostgreSQL) or "more than".
COUNT_CAP = 10_000
#: Argument-text search looks at this many jobs at most: the newest, or the newest before the
#: created range's end (a LIKE cannot use an index).
SEARCH_WINDOW = 20_000
#: The p95 queue wait is taken over at most this many of the last hour's newest executions.
P95_SAMPLE = 5_000

SORTS = ("newest", "oldest", "priority")


@dataclass(frozen=True, slots=True)
class JobQuery:
    """What the console's job list filters on; ``None`` means any. Validated by the caller."""

    status: JobStatus | None = None
    task: str | None = None
    tag: str | None = None
    business_key: str | None = None
    priority: int | None = None
    node: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    #: A job id, or text to look for in the encoded arguments.
    search: str | None = None
    sort: str = "newest"


@dataclass(frozen=True, slots=True)
class JobRow:
    """One line of the job list."""

    id: uuid.UUID
    task: str
    status: JobStatus
    priority: int
    attempts: int
    max_retries: int
    created_at: datetime
    scheduled_at: datetime
    finished_at: datetime | None
    picked_by: str | None
    error: str | None
    tags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class JobList:
    """One page of the job list and the cursor of the next one."""

    rows: list[JobRow]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class Count:
    """A count that is exact up to :data:`COUNT_CAP`; beyond it ``estimated`` or a lower bound."""

    value: int
    exact: bool = True
    estimated: bool = False


_ROW_COLUMNS = (
    job.c.job_id,
    job.c.task,
    job.c.priority,
    job.c.max_retries,
    job.c.created_at,
    job.c.first_due_at,
    job.c.terminal_status,
    job.c.terminal_error,
    job.c.attempts,
    job.c.finished_at,
    job_queue.c.status,
    job_queue.c.scheduled_time,
    job_queue.c.attempts.label("live_attempts"),
    job_queue.c.picked_by,
    job_queue.c.last_error,
)
_FROM = job.outerjoin(job_queue, job_queue.c.job_id == job.c.job_id)


def _filtered(conn: Connection, q: JobQuery, columns: Sequence[Any]) -> Select[Any]:
    stmt = sa.select(*columns).select_from(_FROM)
    if q.status is not None:
        if q.status in LIVE:
            stmt = stmt.where(job_queue.c.status == _const(q.status))
        else:
            stmt = stmt.where(
                job.c.terminal_status == _const(q.status), job_queue.c.job_id.is_(None)
            )
    if q.task is not None:
        stmt = stmt.where(job.c.task == q.task)
    if q.business_key is not None:
        stmt = stmt.where(job.c.business_key == q.business_key)
    if q.priority is not None:
        stmt = stmt.where(job.c.priority == _const(q.priority))
    if q.node is not None:
        # Only RUNNING rows have a picked_by: saying so lets the (status, …) index find them.
        stmt = stmt.where(
            job_queue.c.status == _const(JobStatus.RUNNING), job_queue.c.picked_by == q.node
        )
    if q.tag is not None:
        stmt = stmt.where(
            sa.exists().where(job_tag.c.job_id == job.c.job_id, job_tag.c.tag == q.tag)
        )
    if q.created_after is not None:
        stmt = stmt.where(job.c.created_at >= q.created_after)
    if q.created_before is not None:
        stmt = stmt.where(job.c.created_at < q.created_before)
    if q.search:
        as_id = _uuid_or_none(q.search)
        if as_id is not None:
            stmt = stmt.where(job.c.job_id == as_id)
        else:
            stmt = stmt.where(job.c.payload.contains(q.search, autoescape=True))
            # A LIKE cannot use an index: look only at the newest SEARCH_WINDOW jobs created
            # before the range's end, found on the created_at index.
            window = sa.select(job.c.created_at).order_by(job.c.created_at.desc())
            if q.created_before is not None:
                window = window.where(job.c.created_at < q.created_before)
            floor = conn.execute(window.offset(SEARCH_WINDOW).limit(1)).scalar()
            if floor is not None:
                stmt = stmt.where(job.c.created_at > floor)
    return stmt


def _const(value: JobStatus | int) -> Any:
    """A status or priority written into the SQL text rather than bound.

    The partial indexes (``status = 'PENDING'``, ``priority <> 2``) are usable only where
    PostgreSQL can prove the predicate from the query text; a bound parameter would do only
    while the driver's statement is not yet prepared with a generic plan. Safe: the value is a
    member of an enum (or a validated priority level), never request text.
    """
    if isinstance(value, JobStatus):
        return sa.literal_column(f"'{value.value}'", sa.String)
    return sa.literal_column(str(int(value)), sa.SmallInteger)


def _ordered(stmt: Select[Any], sort: str, cursor: str | None) -> Select[Any]:
    """Apply ``sort`` ("newest" or "oldest"; see :func:`_by_priority`) and the keyset ``cursor``.

    Ids grow with time (UUIDv7), so jobs inserted later never shift a page already handed out.
    """
    after = _parse_cursor(sort, cursor) if cursor else None
    if sort == "oldest":
        if after is not None:
            stmt = stmt.where(job.c.job_id > after[1])
        return stmt.order_by(job.c.job_id.asc())
    if after is not None:
        stmt = stmt.where(job.c.job_id < after[1])
    return stmt.order_by(job.c.job_id.desc())


def _parse_cursor(sort: str, cursor: str) -> tuple[int, uuid.UUID]:
    kind, _, rest = cursor.partition(".")
    try:
        if sort == "priority" and kind == "p":
            prio, _, last = rest.partition(".")
            return int(prio), uuid.UUID(last)
        if sort != "priority" and kind == sort[0]:
            return 0, uuid.UUID(rest)
    except ValueError:
        pass
    raise ValueError(f"cursor {cursor!r} does not belong to this list")


def _cursor(sort: str, row: JobRow) -> str:
    if sort == "priority":
        return f"p.{row.priority}.{row.id}"
    return f"{sort[0]}.{row.id}"


def list_jobs(conn: Connection, q: JobQuery, limit: int, cursor: str | None = None) -> JobList:
    """One page of jobs matching ``q`` in ``q.sort`` order.

    :raises ValueError: if ``cursor`` was not made by this function for the same sort.
    """
    if q.sort == "priority":
        raw = _by_priority(conn, q, limit + 1, cursor)
    else:
        stmt = _ordered(_filtered(conn, q, _ROW_COLUMNS), q.sort, cursor).limit(limit + 1)
        raw = list(conn.execute(stmt).all())
    tags = _tags(conn, [r.job_id for r in raw[:limit]])
    rows = [_to_row(r, tags.get(r.job_id, ())) for r in raw[:limit]]
    more = len(raw) > limit
    return JobList(rows, _cursor(q.sort, rows[-1]) if more and rows else None)


def _by_priority(conn: Connection, q: JobQuery, want: int, cursor: str | None) -> list[Any]:
    """Up to ``want`` rows, highest priority first, newest first within a priority.

    One query per priority level, each on an index newest first: the ``(priority, job_id)``
    index for every level but NORMAL (it leaves the default out), the primary key for NORMAL.
    A single ``ORDER BY priority DESC, job_id DESC`` would have to sort the whole table.
    """
    after = _parse_cursor("priority", cursor) if cursor else None
    top = after[0] if after is not None else max(int(p) for p in Priority)
    if top not in {int(p) for p in Priority}:
        raise ValueError(f"cursor {cursor!r} names no priority")
    out: list[Any] = []
    for level in range(top, min(int(p) for p in Priority) - 1, -1):
        if q.priority is not None and q.priority != level:
            continue
        stmt = _filtered(conn, replace(q, priority=level), _ROW_COLUMNS)
        if after is not None and level == after[0]:
            stmt = stmt.where(job.c.job_id < after[1])
        stmt = stmt.order_by(job.c.job_id.desc()).limit(want - len(out))
        out += conn.execute(stmt).all()
        if len(out) >= want:
            break
    return out


def count_jobs(
    conn: Connection,
    q: JobQuery,
    cap: int,
    *,
    among: Collection[JobStatus] | None = None,
    upto: uuid.UUID | None = None,
) -> int:
    """How many jobs match ``q``, counting no further than ``cap + 1``.

    ``among`` keeps only jobs in those statuses (what an action may start from; an ended status
    means the cold row's, with no hot row); ``upto`` only jobs with an id no newer than it.
    """
    stmt = _restricted(_filtered(conn, q, [job.c.job_id]), among, upto)
    inner = stmt.limit(cap + 1).subquery()
    return int(conn.execute(sa.select(sa.func.count()).select_from(inner)).scalar_one())


def matching_ids(
    conn: Connection,
    q: JobQuery,
    limit: int,
    *,
    among: Collection[JobStatus] | None = None,
    upto: uuid.UUID | None = None,
) -> list[uuid.UUID]:
    """The ids of the newest ``limit`` jobs matching ``q`` (what a bulk action acts on);
    ``among`` and ``upto`` as in :func:`count_jobs`."""
    stmt = _restricted(_filtered(conn, q, [job.c.job_id]), among, upto)
    return list(conn.execute(stmt.order_by(job.c.job_id.desc()).limit(limit)).scalars())


def _restricted(
    stmt: Select[Any], among: Collection[JobStatus] | None, upto: uuid.UUID | None
) -> Select[Any]:
    if among is not None:
        # Literal statuses, and no OR when one side is empty: each side can then use its index
        # ((terminal_status, job_id) for ended jobs, the PENDING index for live ones).
        live = [_const(s) for s in sorted(among) if s in LIVE]
        ended = [_const(s) for s in sorted(among) if s not in LIVE]
        hot = job_queue.c.status.in_(live)
        cold = sa.and_(job_queue.c.job_id.is_(None), job.c.terminal_status.in_(ended))
        if live and ended:
            stmt = stmt.where(sa.or_(hot, cold))
        elif live:
            stmt = stmt.where(hot)
        else:
            stmt = stmt.where(cold)
    if upto is not None:
        stmt = stmt.where(job.c.job_id <= upto)
    return stmt


def newer_than(conn: Connection, q: JobQuery, newest: uuid.UUID, cap: int) -> int:
    """How many jobs matching ``q`` arrived after ``newest`` (up to ``cap + 1``)."""
    inner = (
        _filtered(conn, q, [job.c.job_id]).where(job.c.job_id > newest).limit(cap + 1).subquery()
    )
    return int(conn.execute(sa.select(sa.func.count()).select_from(inner)).scalar_one())


def _tags(conn: Connection, ids: list[uuid.UUID]) -> dict[uuid.UUID, tuple[str, ...]]:
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


def _to_row(r: Any, tags: tuple[str, ...]) -> JobRow:
    live = r.status is not None
    return JobRow(
        id=r.job_id,
        task=r.task,
        status=JobStatus(r.status if live else r.terminal_status),
        priority=r.priority,
        attempts=r.live_attempts if live else r.attempts,
        max_retries=r.max_retries,
        created_at=r.created_at,
        scheduled_at=r.scheduled_time if live else r.first_due_at,
        finished_at=r.finished_at,
        picked_by=r.picked_by,
        error=r.last_error if live else r.terminal_error,
        tags=tags,
    )


def _uuid_or_none(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text.strip())
    except ValueError:
        return None


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
        when = _aware(minute)
        seen[when] = (int(total) - int(fails or 0), int(fails or 0))
    out = []
    for i in range(minutes):
        at = start + timedelta(minutes=i)
        ok, bad = seen.get(at, (0, 0))
        out.append(Minute(at, ok, bad))
    return out


def _aware(value: Any) -> datetime:
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
                job_queue.c.status == _const(JobStatus.PENDING),
                job_queue.c.priority == _const(prio),
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
    progress: dict[str, Any] | None
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
    logs = conn.execute(
        sa.select(job_log)
        .where(job_log.c.job_id == job_id)
        .order_by(job_log.c.log_id)
        .limit(log_limit + 1)
    ).all()
    progress_text = conn.execute(
        sa.select(sa.func.coalesce(job_queue.c.progress, job.c.progress))
        .select_from(_FROM)
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
    progress = payload.loads(progress_text) if progress_text else None
    return JobExtras(
        executions=list(executions),
        logs=list(logs[:log_limit]),
        logs_truncated=len(logs) > log_limit,
        progress=progress if isinstance(progress, dict) else None,
        supersedes=list(supersedes),
        dependents=list(dependents),
        alerts=list(alerts),
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
            first_seen=_aware(g.first_seen),
            last_seen=_aware(g.last_seen),
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
