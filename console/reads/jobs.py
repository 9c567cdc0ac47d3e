"""The console's job lists, in SQLAlchemy Core for both dialects (its summaries are in
:mod:`.overview`).

Every query here is bounded, so a page costs the same with a thousand jobs or a million:

- lists are keyset-paged (``WHERE job_id < :cursor ORDER BY job_id DESC LIMIT n``) on an index
  for each filter the console offers (see ``schema.py``);
- counts stop at a cap (``SELECT count(*) FROM (SELECT 1 … LIMIT cap + 1)``).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql import Select

from flask_ratchet.columns import const
from flask_ratchet.options import Priority
from flask_ratchet.paging import Page, cursor_id, read_cursor
from flask_ratchet.paging import cursor as cursor_of
from flask_ratchet.payload import Unreadable, read_member
from flask_ratchet.schema import job, job_queue, queue_state
from flask_ratchet.states import LIVE, JobStatus
from flask_ratchet.store.job_reads import narrowed, tags_of
from flask_ratchet.substates import (
    OF_STATUS,
    STATUS_OF,
    SubState,
    substate,
    waits_on_another_job,
)

from .job_search import FAILED_SORT, by_failure_time, failed_cursor, where_error, where_id_prefix
from .job_search import id_prefix as _id_prefix
from .substates import where_substate

#: Exact counts stop here; beyond it a count is an estimate (PostgreSQL) or "more than".
COUNT_CAP = 10_000
#: Argument-text and error-text search look at this many jobs at most: the newest, or the
#: newest before the created range's end (a LIKE cannot use an index).
SEARCH_WINDOW = 20_000
#: The list's orders; ``failed`` (FAILED jobs by when they failed) needs ``status=FAILED``.
SORTS = ("newest", "oldest", "priority", FAILED_SORT)
STATUSES_WITH_SUBSTATES = frozenset(OF_STATUS)


@dataclass(frozen=True, slots=True)
class JobQuery:
    """What the console's job list filters on; ``None`` means any. Validated by the caller."""

    #: One status, or several (a job in any of them).
    status: JobStatus | frozenset[JobStatus] | None = None
    task: str | None = None
    queue: str | None = None
    tag: str | None = None
    business_key: str | None = None
    #: Who submitted the jobs (``RATCHET_PRINCIPAL``).
    principal: str | None = None
    priority: int | None = None
    node: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    #: A job id, a job id's prefix (8 hex digits or more), or text to look for in the encoded
    #: arguments.
    search: str | None = None
    #: Text to look for in each job's last error.
    error: str | None = None
    #: The id of the recurring master whose children to list.
    recurring_id: str | None = None
    #: The FAILED jobs of one dead-letter group, with ``task`` (see :mod:`.dead_letters`).
    fingerprint: str | None = None
    sort: str = "newest"
    #: A sub-state of ``status`` (see :mod:`flask_ratchet.substates`), judged at ``now``.
    sub: SubState | None = None
    #: The time sub-states are judged at: the database's, as the page read it (None: this
    #: process's clock).
    now: datetime | None = None

    @property
    def statuses(self) -> frozenset[JobStatus]:
        """The statuses wanted (empty: any)."""
        if self.status is None:
            return frozenset()
        return frozenset({self.status}) if isinstance(self.status, JobStatus) else self.status


@dataclass(frozen=True, slots=True)
class JobRow:
    """One line of the job list."""

    id: uuid.UUID
    task: str
    status: JobStatus | Unreadable
    priority: int
    queue: str
    attempts: int
    max_retries: int
    created_at: datetime
    scheduled_at: datetime
    finished_at: datetime | None
    picked_by: str | None
    error: str | None
    tags: tuple[str, ...] = ()
    #: The claim's time and when its attempt started (RUNNING jobs).
    picked_at: datetime | None = None
    started_at: datetime | None = None
    #: What a PENDING or RUNNING job is doing (:mod:`flask_ratchet.substates`).
    sub: SubState | None = None

    @property
    def waits_on_job(self) -> bool:
        """Whether a PENDING job waits on another job (a step's parent, a batch's children)."""
        return self.status == JobStatus.PENDING and waits_on_another_job(self.scheduled_at)


@dataclass(frozen=True, slots=True)
class Count:
    """A count that is exact up to :data:`COUNT_CAP`; beyond it ``estimated`` or a lower bound."""

    value: int
    exact: bool = True
    estimated: bool = False


#: The columns of a :class:`JobRow` (see :func:`to_row`), over :data:`JOBS_WITH_HOT_ROW`.
ROW_COLUMNS = (
    job.c.job_id,
    job.c.task,
    job.c.queue,
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
    job_queue.c.picked_at,
    job_queue.c.started_at,
)
JOBS_WITH_HOT_ROW = job.outerjoin(job_queue, job_queue.c.job_id == job.c.job_id)


class _Floor(enum.Enum):
    """The default of the ``floor`` arguments below: look the search floor up here."""

    LOOK_UP = "look up"


#: A search floor (see :func:`search_floor`) or :attr:`_Floor.LOOK_UP`.
Floor = datetime | None | _Floor


def searches_text(q: JobQuery) -> bool:
    """Whether ``q`` looks for text (arguments or errors): a search no index serves, bounded
    by :func:`search_floor`. A job id or an id prefix is no text search."""
    if q.error:
        return True
    if not q.search:
        return False
    return _uuid_or_none(q.search) is None and _id_prefix(q.search) is None


def search_floor(conn: Connection, q: JobQuery) -> datetime | None:
    """The oldest ``created_at`` a text search of ``q`` (arguments or errors) looks at (None:
    no bound, or no text search). A LIKE cannot use an index: the search looks only at the
    newest :data:`SEARCH_WINDOW` jobs created before the range's end, found on the created_at
    index.

    One request works it out once and passes it as ``floor`` to each query it runs.
    """
    if not searches_text(q):
        return None
    window = sa.select(job.c.created_at).order_by(job.c.created_at.desc())
    if q.created_before is not None:
        window = window.where(job.c.created_at < q.created_before)
    found: datetime | None = conn.execute(window.offset(SEARCH_WINDOW).limit(1)).scalar()
    return found


def _floor(conn: Connection, q: JobQuery, floor: Floor) -> datetime | None:
    return search_floor(conn, q) if isinstance(floor, _Floor) else floor


def where_status(stmt: Select[Any], status: JobStatus) -> Select[Any]:
    """``stmt`` (over jobs outer-joined to their hot rows) kept to jobs in ``status``: the hot
    row's while it is live, else the cold row's, with no hot row."""
    if status in LIVE:
        return stmt.where(job_queue.c.status == const(status))
    return stmt.where(job.c.terminal_status == const(status), job_queue.c.job_id.is_(None))


def live_or_cold(live: str | None, ended: str | None) -> JobStatus | Unreadable:
    """A job's status: its hot row's while it is live, else its cold row's; the stored text as
    :class:`~flask_ratchet.payload.Unreadable` if it is not one of the six."""
    if live is not None:
        return read_member(JobStatus, "status", live)
    return read_member(JobStatus, "terminal_status", ended)


def _filtered(q: JobQuery, columns: Sequence[Any], floor: datetime | None) -> Select[Any]:
    """Jobs matching ``q``; ``floor`` is :func:`search_floor`'s for ``q``."""
    stmt = sa.select(*columns).select_from(JOBS_WITH_HOT_ROW)
    if isinstance(q.status, JobStatus):
        stmt = where_status(stmt, q.status)
    elif q.status:
        stmt = _restricted(stmt, q.status, None)
    if q.sub is not None:
        stmt = where_status(stmt, STATUS_OF[q.sub])
        stmt = where_substate(stmt, q.sub, q.now or datetime.now(UTC))
    stmt = narrowed(
        stmt,
        task=q.task,
        business_key=q.business_key,
        tag=q.tag,
        created_after=q.created_after,
        created_before=q.created_before,
        queue=q.queue,
        principal=q.principal,
        fingerprint=q.fingerprint,
    )
    if q.priority is not None:
        stmt = stmt.where(job.c.priority == const(q.priority))
    if q.node is not None:
        # Only RUNNING rows have a picked_by: saying so lets the (status, …) index find them.
        stmt = stmt.where(
            job_queue.c.status == const(JobStatus.RUNNING), job_queue.c.picked_by == q.node
        )
    if q.recurring_id is not None:
        # Walked newest first on the partial index (recurring_id, job_id).
        stmt = stmt.where(job.c.recurring_id == q.recurring_id)
    if q.search:
        as_id = _uuid_or_none(q.search)
        prefix = None if as_id is not None else _id_prefix(q.search)
        if as_id is not None:
            stmt = stmt.where(job.c.job_id == as_id)
        elif prefix is not None:
            stmt = where_id_prefix(stmt, prefix)
        else:
            stmt = stmt.where(job.c.payload.contains(q.search, autoescape=True))
    if q.error:
        stmt = where_error(stmt, q.error)
    if floor is not None:
        stmt = stmt.where(job.c.created_at > floor)
    return stmt


def _ordered(stmt: Select[Any], sort: str, cursor: str | None) -> Select[Any]:
    """Apply ``sort`` ("newest", "oldest" or "failed"; see :func:`_by_priority`) and the keyset
    ``cursor``.

    Ids grow with time (UUIDv7), so jobs inserted later never shift a page already handed out.
    """
    if sort == FAILED_SORT:
        return by_failure_time(stmt, cursor)
    after = _parse_cursor(sort, cursor) if cursor else None
    if sort == "oldest":
        if after is not None:
            stmt = stmt.where(job.c.job_id > after[1])
        return stmt.order_by(job.c.job_id.asc())
    if after is not None:
        stmt = stmt.where(job.c.job_id < after[1])
    return stmt.order_by(job.c.job_id.desc())


def _parse_cursor(sort: str, cursor: str) -> tuple[int, uuid.UUID]:
    """The (priority, id) a cursor of the ``sort`` list carries on after."""
    if sort == "priority":
        prio, job_id = read_cursor(cursor, "p", int, uuid.UUID)
        return int(prio), job_id
    return 0, cursor_id(cursor, sort[0])


def _cursor(sort: str, row: JobRow) -> str:
    if sort == "priority":
        return cursor_of("p", row.priority, row.id)
    if sort == FAILED_SORT and row.finished_at is not None:
        return failed_cursor(row.finished_at, row.id)
    return cursor_of(sort[0], row.id)


def list_jobs(
    conn: Connection,
    q: JobQuery,
    limit: int,
    cursor: str | None = None,
    *,
    floor: Floor = _Floor.LOOK_UP,
) -> Page[JobRow]:
    """One page of jobs matching ``q`` in ``q.sort`` order (``floor``: :func:`search_floor`'s,
    looked up unless given).

    :raises ValueError: if ``cursor`` was not made by this function for the same sort.
    """
    found = _floor(conn, q, floor)
    if q.sort == "priority":
        raw = _by_priority(conn, q, limit + 1, cursor, found)
    else:
        stmt = _ordered(_filtered(q, ROW_COLUMNS, found), q.sort, cursor).limit(limit + 1)
        raw = list(conn.execute(stmt).all())
    tags = tags_of(conn, [r.job_id for r in raw[:limit]])
    rows = [to_row(r, tags.get(r.job_id, ())) for r in raw[:limit]]
    rows = _with_substates(conn, rows, q.now or datetime.now(UTC))
    more = len(raw) > limit
    return Page(rows, _cursor(q.sort, rows[-1]) if more and rows else None)


def _by_priority(
    conn: Connection, q: JobQuery, want: int, cursor: str | None, floor: datetime | None
) -> list[Any]:
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
        stmt = _filtered(replace(q, priority=level), ROW_COLUMNS, floor)
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
    floor: Floor = _Floor.LOOK_UP,
) -> int:
    """How many jobs match ``q``, counting no further than ``cap + 1``.

    ``among`` keeps only jobs in those statuses (what an action may start from; an ended status
    means the cold row's, with no hot row); ``upto`` only jobs with an id no newer than it;
    ``floor`` as in :func:`list_jobs`.
    """
    stmt = _restricted(_filtered(q, [job.c.job_id], _floor(conn, q, floor)), among, upto)
    inner = stmt.limit(cap + 1).subquery()
    return int(conn.execute(sa.select(sa.func.count()).select_from(inner)).scalar_one())


def matching_ids(
    conn: Connection,
    q: JobQuery,
    limit: int,
    *,
    among: Collection[JobStatus] | None = None,
    upto: uuid.UUID | None = None,
    floor: Floor = _Floor.LOOK_UP,
) -> list[uuid.UUID]:
    """The ids of the newest ``limit`` jobs matching ``q`` (what a bulk action acts on);
    ``among``, ``upto`` and ``floor`` as in :func:`count_jobs`."""
    stmt = _restricted(_filtered(q, [job.c.job_id], _floor(conn, q, floor)), among, upto)
    return list(conn.execute(stmt.order_by(job.c.job_id.desc()).limit(limit)).scalars())


def _restricted(
    stmt: Select[Any], among: Collection[JobStatus] | None, upto: uuid.UUID | None
) -> Select[Any]:
    if among is not None:
        # Literal statuses, and no OR when one side is empty: each side can then use its index
        # ((terminal_status, job_id) for ended jobs, the PENDING index for live ones).
        live = [const(s) for s in sorted(among) if s in LIVE]
        ended = [const(s) for s in sorted(among) if s not in LIVE]
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
    matching = _filtered(q, [job.c.job_id], search_floor(conn, q))
    inner = matching.where(job.c.job_id > newest).limit(cap + 1).subquery()
    return int(conn.execute(sa.select(sa.func.count()).select_from(inner)).scalar_one())


def to_row(r: Any, tags: tuple[str, ...] = ()) -> JobRow:
    """A row of :data:`ROW_COLUMNS` as a :class:`JobRow`."""
    live = r.status is not None
    return JobRow(
        id=r.job_id,
        task=r.task,
        status=live_or_cold(r.status, r.terminal_status),
        priority=r.priority,
        queue=r.queue,
        attempts=r.live_attempts if live else r.attempts,
        max_retries=r.max_retries,
        created_at=r.created_at,
        scheduled_at=r.scheduled_time if live else r.first_due_at,
        finished_at=r.finished_at,
        picked_by=r.picked_by,
        error=r.last_error if live else r.terminal_error,
        tags=tags,
        picked_at=r.picked_at,
        started_at=r.started_at,
    )


def _with_substates(conn: Connection, rows: list[JobRow], now: datetime) -> list[JobRow]:
    """``rows`` with the sub-state of each PENDING or RUNNING job at ``now``."""
    if not any(r.status in STATUSES_WITH_SUBSTATES for r in rows):
        return rows
    paused = set(conn.execute(sa.select(queue_state.c.name).where(queue_state.c.paused)).scalars())
    return [
        replace(
            r,
            sub=substate(
                r.status,
                due_at=r.scheduled_at,
                attempts=r.attempts,
                now=now,
                queue_paused=r.queue in paused,
                picked_at=r.picked_at,
                started_at=r.started_at,
            ),
        )
        if r.status in STATUSES_WITH_SUBSTATES
        else r
        for r in rows
    ]


def _uuid_or_none(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text.strip())
    except ValueError:
        return None
