"""The dead-letter page: the jobs that failed for good (FAILED now), grouped by task and
fingerprint (their error with what varies between jobs replaced, stored on the row when the job
failed: :mod:`flask_ratchet.fingerprints`).

A group is exactly what the console's ``task`` and ``fingerprint`` filters select among FAILED
jobs, so the count a card shows is the count a retry or a delete of that group confirms and
changes. The groups are read on the index of FAILED jobs by ``(task, fingerprint, job_id)``;
the FAILED jobs are what the job retention keeps (``RATCHET_RETENTION_DAYS``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from flask_ratchet.columns import aware, const
from flask_ratchet.schema import job, job_queue
from flask_ratchet.states import JobStatus

#: Sample jobs shown per group, newest first.
SAMPLES = 3
#: Groups per page.
GROUPS_PER_PAGE = 100


@dataclass(frozen=True, slots=True)
class Sample:
    """One job of a group, with the error it failed with."""

    job_id: uuid.UUID
    error: str | None


@dataclass(frozen=True, slots=True)
class FailureGroup:
    """The FAILED jobs of one task with one fingerprint."""

    task: str
    #: ``None``: jobs that a version without fingerprints failed (the migration gives every
    #: job failed before it one); they are one group of their task, with no action of its own.
    fingerprint: str | None
    jobs: int
    first_seen: datetime | None
    last_seen: datetime | None
    samples: list[Sample]


@dataclass(frozen=True, slots=True)
class GroupPage:
    """A page of groups, the largest first, and how many groups there are in all."""

    groups: list[FailureGroup]
    total: int
    #: How many groups come before this page.
    offset: int


def _failed(*columns: Any) -> sa.Select[Any]:
    """FAILED jobs: the cold row's status, with no hot row (a FAILED job paused is PAUSED)."""
    return (
        sa.select(*columns)
        .select_from(job.outerjoin(job_queue, job_queue.c.job_id == job.c.job_id))
        .where(job.c.terminal_status == const(JobStatus.FAILED), job_queue.c.job_id.is_(None))
    )


def failure_groups(conn: Connection, limit: int = GROUPS_PER_PAGE, offset: int = 0) -> GroupPage:
    """The groups of FAILED jobs, the most jobs first (then the most recently failed), from
    ``offset``, at most ``limit``; with their samples."""
    jobs = sa.func.count().label("jobs")
    last = sa.func.max(job.c.finished_at).label("last_seen")
    grouped = _failed(
        job.c.task,
        job.c.fingerprint,
        jobs,
        sa.func.min(job.c.finished_at).label("first_seen"),
        last,
    ).group_by(job.c.task, job.c.fingerprint)
    # The number of groups rides along each row (a window over the groups): the FAILED jobs
    # are read and grouped once, not once more to count the groups.
    rows = conn.execute(
        grouped.add_columns(sa.func.count().over().label("total"))
        # Ties in a fixed order on every database (where NULLs sort differs), for stable pages.
        .order_by(
            jobs.desc(), last.desc(), job.c.task, job.c.fingerprint.is_(None), job.c.fingerprint
        )
        .limit(limit)
        .offset(offset)
    ).all()
    if rows:
        total = rows[0].total
    else:  # no group, or a page past the last: counted on its own
        total = conn.execute(
            sa.select(sa.func.count()).select_from(grouped.subquery())
        ).scalar_one()
    groups = [
        FailureGroup(
            task=r.task,
            fingerprint=r.fingerprint,
            jobs=int(r.jobs),
            first_seen=_aware(r.first_seen),
            last_seen=_aware(r.last_seen),
            samples=_samples(conn, r.task, r.fingerprint),
        )
        for r in rows
    ]
    return GroupPage(groups, int(total), offset)


def _samples(conn: Connection, task: str, fingerprint: str | None) -> list[Sample]:
    """The newest :data:`SAMPLES` jobs of a group: a short range of the group's index."""
    same = job.c.fingerprint.is_(None) if fingerprint is None else job.c.fingerprint == fingerprint
    rows = conn.execute(
        _failed(job.c.job_id, job.c.terminal_error)
        .where(job.c.task == task, same)
        .order_by(job.c.job_id.desc())
        .limit(SAMPLES)
    )
    return [Sample(r.job_id, r.terminal_error) for r in rows]


def failure_groups_among(
    conn: Connection,
    visible: Callable[[list[uuid.UUID]], set[uuid.UUID]],
    limit: int = GROUPS_PER_PAGE,
    offset: int = 0,
) -> GroupPage:
    """:func:`failure_groups` of the jobs ``visible`` keeps (an operator's, under a job
    policy), grouped here: every FAILED job's id, task, fingerprint and end time is read, and
    the jobs are asked about a thousand at a time."""
    rows = conn.execute(
        _failed(job.c.job_id, job.c.task, job.c.fingerprint, job.c.finished_at).order_by(
            job.c.job_id.desc()
        )
    ).all()
    ids = [r.job_id for r in rows]
    shown: set[uuid.UUID] = set()
    for start in range(0, len(ids), 1000):
        shown |= visible(ids[start : start + 1000])
    members: dict[tuple[str, str | None], list[Any]] = {}
    for r in rows:  # newest first, as they came
        if r.job_id in shown:
            members.setdefault((r.task, r.fingerprint), []).append(r)
    spans = {
        key: _span([r.finished_at for r in found if r.finished_at is not None])
        for key, found in members.items()
    }

    def order(item: tuple[tuple[str, str | None], list[Any]]) -> tuple[Any, ...]:
        (task, fingerprint), found = item
        last = spans[(task, fingerprint)][1]
        stamp = -last.timestamp() if last else 0.0
        return (-len(found), stamp, task, fingerprint is None, fingerprint or "")

    ordered = sorted(members.items(), key=order)[offset : offset + limit]
    errors = _errors(conn, [r.job_id for _, found in ordered for r in found[:SAMPLES]])
    groups = [
        FailureGroup(
            task=task,
            fingerprint=fingerprint,
            jobs=len(found),
            first_seen=spans[(task, fingerprint)][0],
            last_seen=spans[(task, fingerprint)][1],
            samples=[Sample(r.job_id, errors.get(r.job_id)) for r in found[:SAMPLES]],
        )
        for (task, fingerprint), found in ordered
    ]
    return GroupPage(groups, len(members), offset)


def _span(times: list[datetime]) -> tuple[datetime | None, datetime | None]:
    """The first and the last of ``times`` (UTC), or ``None`` for both."""
    if not times:
        return None, None
    return aware(min(times)), aware(max(times))


def _errors(conn: Connection, ids: list[uuid.UUID]) -> dict[uuid.UUID, str | None]:
    if not ids:
        return {}
    rows = conn.execute(sa.select(job.c.job_id, job.c.terminal_error).where(job.c.job_id.in_(ids)))
    return {r.job_id: r.terminal_error for r in rows}


def _aware(value: datetime | None) -> datetime | None:
    return None if value is None else aware(value)
