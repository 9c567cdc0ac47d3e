"""PENDING and RUNNING jobs by sub-state (:mod:`flask_ratchet.substates` has the rule, in
Python; this module says the same in SQL): the job list's filter and the overview's counts
(:mod:`.overview`) use :func:`condition`; running jobs are split into started and waiting for a
thread, per node and per resource, here. Bounded like every read: at most :data:`RUNNING_SCAN`
rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql import ColumnElement, Select

from flask_ratchet.columns import UtcDateTime, const
from flask_ratchet.flows import NOT_YET
from flask_ratchet.schema import job, job_queue, queue_state
from flask_ratchet.states import JobStatus
from flask_ratchet.substates import SubState

#: RUNNING rows looked at for the per-node and per-resource splits: more than any cluster runs.
RUNNING_SCAN = 5_000


def _paused(queue: Any) -> ColumnElement[bool]:
    """Whether ``queue`` (a hot row's queue column) is a paused queue."""
    paused: ColumnElement[bool] = queue.in_(
        sa.select(queue_state.c.name).where(queue_state.c.paused)
    )
    return paused


def _started(picked_at: Any, started_at: Any) -> ColumnElement[bool]:
    """The attempt's thread has taken it: a start recorded, and not an earlier attempt's."""
    return sa.and_(started_at.is_not(None), started_at >= picked_at)


def condition(sub: SubState, now: datetime, columns: Any = job_queue.c) -> ColumnElement[bool]:
    """The SQL for "a hot row of its status is in ``sub`` at ``now``" over ``columns`` (the
    hot table's, or a subquery's with the same names); the status itself is the caller's."""
    due = columns.scheduled_time
    at = sa.literal(now, UtcDateTime)
    never = sa.literal(NOT_YET, UtcDateTime)
    if sub is SubState.STARTED:
        return _started(columns.picked_at, columns.started_at)
    if sub is SubState.CLAIMED:
        return sa.not_(_started(columns.picked_at, columns.started_at))
    if sub is SubState.BLOCKED:
        return sa.or_(due >= never, _paused(columns.queue))
    free = sa.not_(_paused(columns.queue))
    if sub is SubState.DUE:
        return sa.and_(due <= at, free)
    later = sa.and_(due > at, due < never, free)
    if sub is SubState.RETRYING:
        return sa.and_(later, columns.attempts > 0)
    return sa.and_(later, columns.attempts <= 0)


def where_substate(stmt: Select[Any], sub: SubState, now: datetime) -> Select[Any]:
    """``stmt`` (over the hot table, its status already kept to ``sub``'s) kept to ``sub``."""
    return stmt.where(condition(sub, now))


def started_by(conn: Connection, key: str) -> dict[str, int]:
    """RUNNING jobs whose attempt has started, per ``key``: ``"node"`` (the claim's
    ``picked_by``) or ``"resource"`` (the job's resource, read per row on the primary key)."""
    running = (
        sa.select(job_queue.c.job_id, job_queue.c.picked_by)
        .where(
            job_queue.c.status == const(JobStatus.RUNNING),
            _started(job_queue.c.picked_at, job_queue.c.started_at),
        )
        .limit(RUNNING_SCAN)
        .subquery()
    )
    if key == "node":
        group: Any = running.c.picked_by
    else:
        group = (
            sa.select(job.c.resource_name).where(job.c.job_id == running.c.job_id).scalar_subquery()
        )
    named = sa.select(group.label("k")).select_from(running).subquery()
    rows = conn.execute(sa.select(named.c.k, sa.func.count().label("n")).group_by(named.c.k))
    return {r.k: int(r.n) for r in rows if r.k is not None}


def split(running: int, started: Mapping[str, int], name: str) -> tuple[int, int]:
    """``running`` jobs of ``name`` as (started, waiting for a thread)."""
    began = min(started.get(name, 0), running)
    return began, running - began
